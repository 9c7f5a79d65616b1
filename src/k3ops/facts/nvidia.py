"""Facts about the NVIDIA driver, its GPUs and the NVIDIA software around them."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

from ..onhost.drivers import nvml_version
from ..vendor_units import FABRIC_MANAGER
from .util import NvidiaSmiFact, pci_bus_ids, pci_functions_command

GPU_QUERY_FIELDS = "index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode"
# One row of `--query-gpu=GPU_QUERY_FIELDS --format=csv,noheader,nounits`.
GPU_ROW_REGEX = (
    r"^(?P<index>\d+), (?P<name>[^,]+), (?P<uuid>GPU-[0-9a-fA-F-]+), "
    r"(?P<bus_id>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]), (?P<driver_version>[0-9.]+), "
    r"(?P<memory_total_mib>\d+), (?P<persistence_mode>Enabled|Disabled)$"
)
DRIVER_VERSION_REGEX = r"^\d+\.\d+(?:\.\d+)?$"
# What nvidia-smi prints instead of an answer, and the state each message means.
NVIDIA_SMI_FAILURES = {
    r"Driver/library version mismatch": "mismatch",
    r"couldn't communicate with the NVIDIA driver": "no-driver",
    r"^No devices were found": "no-devices",
}
# A proprietary (non-GPL) module taints the kernel with P; the open module does not.
PROPRIETARY_TAINT = "P"
NVIDIA_PCI_VENDOR = "0x10de"
NVSWITCH_PCI_CLASS = "0x0680"
# `dpkg-query` lines of an installed Fabric Manager: nvidia-fabricmanager (580+) or -<branch> (before).
FABRICMANAGER_PACKAGE_REGEX = r"^\wi\S?\s+nvidia-fabricmanager(?:-\d+)? (?:\d+:)?(?P<version>[^\s-]+)"
CDI_DEVICE_REGEX = r"^[\w.-]+/[\w.-]+=\S+$"
# IMEX channels (NVIDIA's IMEX guide): the driver registers this character device with a dynamic major,
# and an administrator makes each channel's node beneath IMEX_CHANNEL_DIRECTORY; multi-node NVLink jobs open
# channel 0.
IMEX_CHANNEL_DEVICE = "nvidia-caps-imex-channels"
IMEX_CHANNEL_DIRECTORY = f"/dev/{IMEX_CHANNEL_DEVICE}"
IMEX_CHANNEL = f"{IMEX_CHANNEL_DIRECTORY}/channel0"
CHARACTER_DEVICE = "character special file"  # stat's %F


class NvidiaGpus(NvidiaSmiFact):
    """
    Returns the GPUs nvidia-smi sees, or an empty list when it sees none (see ``NvidiaDriverState``):

    .. code:: python

        [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-c79b4f2a-978d-54f0-88be-f538c027f684",
                "bus_id": "00000000:18:00.0",
                "driver_version": "580.105.08",
                "memory_total_mib": 143771,
                "persistence_mode": True,
            },
        ]
    """

    command = f"nvidia-smi --query-gpu={GPU_QUERY_FIELDS} --format=csv,noheader,nounits || true"


    @override
    def process(self, output):
        gpus = []
        for line in output:
            row = re.match(GPU_ROW_REGEX, line.strip())
            if row:
                gpus.append({
                    **row.groupdict(),
                    "index": int(row["index"]),
                    "memory_total_mib": int(row["memory_total_mib"]),
                    "persistence_mode": row["persistence_mode"] == "Enabled",
                })
        return gpus


class NvidiaDriverState(FactBase[str]):
    """
    Returns whether the NVIDIA driver answers, and if not why:

    .. code:: python

        "ready"         # nvidia-smi lists the GPUs
        "mismatch"      # the loaded kernel module and the userspace library differ: reboot
        "no-driver"     # no kernel module loaded
        "no-devices"    # the driver is loaded but sees no GPU
        "not-installed" # no nvidia-smi
    """

    command = "nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 || true"

    @override
    def requires_command(self) -> str:
        return "nvidia-smi"

    @staticmethod
    def default():
        return "not-installed"

    @override
    def process(self, output):
        for pattern, state in NVIDIA_SMI_FAILURES.items():
            if any(re.search(pattern, line) for line in output):
                return state
        if any(re.match(DRIVER_VERSION_REGEX, line.strip()) for line in output):
            return "ready"
        raise FactProcessError(f"nvidia-smi gave an answer k3ops does not know: {' / '.join(output)}")


class NvidiaKernelModule(FactBase[dict | None]):
    """
    Returns the loaded nvidia kernel module, or ``None`` when it is not loaded:

    .. code:: python

        {"version": "580.105.08", "flavour": "open"}  # or "proprietary"
    """

    command = "cat /sys/module/nvidia/version /sys/module/nvidia/taint 2>/dev/null || true"

    @override
    def process(self, output):
        lines = [line.strip() for line in output]
        if not lines or not lines[0]:
            return None
        taint = lines[1] if len(lines) > 1 else ""
        return {"version": lines[0], "flavour": "proprietary" if PROPRIETARY_TAINT in taint else "open"}


class NvidiaUserspaceVersion(FactBase[str | None]):
    """
    Returns the installed driver's userspace version, from the NVML library's file name
    (``None`` when no driver is installed):

    .. code:: python

        "580.105.08"
    """

    # Debian's multiarch directory is named after the machine (x86_64-linux-gnu, aarch64-linux-gnu).
    command = "readlink -e /usr/lib/$(uname -m)-linux-gnu/libnvidia-ml.so.1 || true"

    @override
    def process(self, output):
        return nvml_version("\n".join(output))


class NvSwitches(FactBase[list[str]]):
    """
    Returns the PCI bus ids of the host's NVSwitches (an HGX baseboard has four), read from sysfs so
    that it needs no tool a deploy has yet to install:

    .. code:: python

        ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    """

    # NVIDIA's vendor id, PCI class 0680 (other bridge): the NVSwitch, not the GPUs (class 03xx).
    command = pci_functions_command((NVIDIA_PCI_VENDOR,), (NVSWITCH_PCI_CLASS,))

    default = list

    @override
    def process(self, output):
        return pci_bus_ids(output)


class FabricManager(FactBase[dict]):
    """
    Returns the installed Fabric Manager's version (``None`` when not installed) and whether its
    service runs:

    .. code:: python

        {"installed_version": "580.126.09", "active": True}
    """

    command = (
        "dpkg-query --show --showformat='${db:Status-Abbrev} ${Package} ${Version}\\n' "
        "'nvidia-fabricmanager*' 2>/dev/null || true; "
        f"systemctl is-active {FABRIC_MANAGER} 2>/dev/null || true"
    )

    @staticmethod
    def default():
        return {"installed_version": None, "active": False}

    @override
    def process(self, output):
        packages = [match for line in output if (match := re.match(FABRICMANAGER_PACKAGE_REGEX, line))]
        return {
            "installed_version": packages[0]["version"] if packages else None,
            "active": any(line.strip() == "active" for line in output),
        }


class CdiDevices(FactBase[list[str]]):
    """
    Returns the devices of the host's CDI specs, as containers name them:

    .. code:: python

        ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-c79b4f2a-978d-54f0-88be-f538c027f684", "nvidia.com/gpu=all"]
    """

    command = "nvidia-ctk cdi list"

    @override
    def requires_command(self) -> str:
        return "nvidia-ctk"

    default = list

    @override
    def process(self, output):
        return [line.strip() for line in output if re.match(CDI_DEVICE_REGEX, line.strip())]


class ImexChannel(FactBase[dict]):
    """
    Returns the major number the driver registered for IMEX channels (``None`` when no loaded driver did), the
    node of channel 0 (``None`` when absent), and whether that node is the registered device's channel 0: a node
    made with another device's major (nvidia-caps shares the prefix) or another boot's opens nothing.

    .. code:: python

        {"registered_major": 509, "node": {"type": "character special file", "major": 509, "minor": 0},
         "ready": True}
    """

    command = (f"awk '$2 == \"{IMEX_CHANNEL_DEVICE}\" {{ print \"registered\", $1 }}' /proc/devices; "
               f"stat -c 'node %t %T %F' {IMEX_CHANNEL} 2>/dev/null || true")

    @staticmethod
    def default():
        return {"registered_major": None, "node": None, "ready": False}

    @override
    def process(self, output):
        found = self.default()
        for line in output:
            word, _, rest = line.strip().partition(" ")
            if word == "registered":
                found["registered_major"] = int(rest)
            elif word == "node":
                major, minor, kind = rest.split(" ", 2)
                found["node"] = {"type": kind, "major": int(major, 16), "minor": int(minor, 16)}
        node = found["node"]
        found["ready"] = bool(node) and found["registered_major"] is not None and node == {
            "type": CHARACTER_DEVICE, "major": found["registered_major"], "minor": 0}
        return found
