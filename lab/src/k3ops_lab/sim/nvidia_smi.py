"""nvidia-smi for the lab's simulated NVIDIA driver: byte-for-byte the output of the 580/590 drivers.

Host-validation suites parse nvidia-smi with regexes written against real hosts, so every layout
here was taken from real captures (/work/shared/fixtures/real) and nvidia-smi's behaviour as users
report it: the failure modes first (no kernel module: exit 9; module and library at different
versions: exit 18), then the default table, -L, --version, -q, --query-gpu/--query-compute-apps,
topo -m, nvlink -s, -pm and -r (GPU reset). The queries (-q, --query-*) live in nvidia_smi_query.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from . import nvidia_devices as devices
from .daemons import HOSTENGINE_ADDRESS
from .host import LEGACY_PERSISTENCE_FLAG, SimHost, cuda_version
from .nvidia_devices import DriverState, NvidiaGpu, PciAddress, cpu_affinity, major_minor, numa_affinity
from .nvidia_smi_query import (
    EXIT_INVALID_ARGUMENT,
    INVALID_ARGUMENTS,
    run_compute_apps_query,
    run_gpu_query,
    run_q,
)

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
VERSION_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {library}"
UNKNOWN_OPTION = "ERROR: Option {option} is not recognized. Please run 'nvidia-smi -h' for help.\n"
MISSING_VALUE = "ERROR: Option {option} is missing its value. Please run 'nvidia-smi -h' for help.\n"
NO_DEVICES = "No devices were found"
# nvidia-smi's exit statuses (man nvidia-smi, RETURN VALUE), NVML's error codes.
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_LIBRARY_MISMATCH = 18

# The default table. Each GPU is three rows of three cells 41, 24 and 22 characters wide.
TABLE_RULE = "+" + "-" * 89 + "+"
TABLE_HEADER = "| NVIDIA-SMI {smi:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|"
GPU_RULE = "+-----------------------------------------+------------------------+----------------------+"
GPU_COLUMNS = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|=========================================+========================+======================|",
)
GPU_ROW_IDENTITY = "|{index:>4}  {name:<27}    {persistence:<3} |   {bus_id} {display:>3} |{ecc:>21} |"
GPU_ROW_READINGS = (
    "| {fan:>3}  {temperature:>3}C    {pstate:<2}{usage:>16} / {cap:>4}W |"
    "{used:>8}MiB / {total:>6}MiB |{utilization:>8}{compute:>13} |"
)
GPU_ROW_MIG = "|" + " " * 41 + "|" + " " * 24 + "|{mig:>21} |"
NAME_WIDTH = 27
NAME_CUT = 24  # longer names keep 24 characters and "...": "NVIDIA RTX 6000 Ada Gene..."
PROCESSES = (
    TABLE_RULE,
    "| Processes:                                                                              |",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|=========================================================================================|",
    "|  No running processes found                                                             |",
    TABLE_RULE,
)
# ctime() and the 7 spaces nvidia-smi leaves after it.
TIMESTAMP_TRAILER = "       "

VERSION_LINES = (
    "NVIDIA-SMI version  : {smi}",
    "NVML version        : {nvml}",
    "DRIVER version      : {driver}",
    "CUDA Version        : {cuda}",
)
GPU_LIST_LINE = "GPU {index}: {name} (UUID: {uuid})"

PERSISTENCE_ENABLED = "Enabled Legacy persistence mode for GPU {bus_id}."
PERSISTENCE_DISABLED = "Disabled persistence mode for GPU {bus_id}."
PERSISTENCE_UNCHANGED = "Persistence mode is already {state} for GPU {bus_id}."
PERSISTENCE_NOT_ROOT = "Unable to set persistence mode for GPU {bus_id}: Insufficient Permissions"
ALL_DONE = "All done."
TERMINATING = "Terminating early due to previous errors."

# -r / --gpu-reset. Success, one line per GPU then "All done." (NVIDIA/k8s-test-infra issue 759, an 8-GPU
# node; Yandex Cloud's MIG guide); resetting every GPU of an NVSwitch board adds the note before "All done."
# (an HGX capture in a public NVLS recovery write-up). A GPU some process holds open is refused with exit
# status 255 (NVIDIA/gpu-operator issue 118: nvidia-persistenced "keeps a handle on the GPU and blocks
# --gpu-reset"; NVIDIA/NVSentinel issue 1690, exit=255; nvidia-mig-manager's log of the same text in
# ComputeCanada/puppet-magic_castle issue 387); nv-hostengine is such a client too (DCGM's host engine
# keeps every GPU open through NVML).
RESET_DONE = "GPU {bus_id} was successfully reset."
RESET_NVSWITCH_NOTE = (
    "Note: The operation has successfully reset all GPUs and NVSwitches. If the services, such as "
    "nvidia-fabricmanager, which manage or monitor NVSwitches are running, they might have been affected by "
    "this operation. Please refer respective service status or logs for details."
)
RESET_FAILED = "The following GPUs could not be reset:"
RESET_FAILED_GPU = "  GPU {bus_id}: {reason}"
RESET_IN_USE = "In use by another client"
# NVML's error string for NVML_ERROR_NO_PERMISSION, in the per-GPU line the refusals above use; the
# non-root run itself is not on record, nor its exit status: 4 is nvidia-smi's "no permission" status.
RESET_NO_PERMISSION = "Insufficient Permissions"
RESET_IN_USE_HINT = (
    "{count} {devices} currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
    "application, graphics application such as an X server, or a monitoring application such as another "
    "instance of nvidia-smi). Please first kill all processes using {these} and all compute applications "
    "running in the system."
)
EXIT_RESET_FAILED = 255
HOSTENGINE_PROBE_TIMEOUT_S = 0.5

# topo -m: tab-separated, the header underlined when printed to a terminal (only then: captures
# from pipes and CI logs show it plain; see topo/ fixtures).
UNDERLINE, RESET = "\x1b[4m", "\x1b[0m"
TOPO_SELF = " X "
TOPO_LEGEND = (
    "",
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)
NVLINK_LINK = "\t Link {link}: {state}"
NVLINK_INACTIVE = "<inactive>"


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    state = devices.driver_state(host)
    if state is DriverState.NO_KERNEL_MODULE:
        print(NO_DRIVER)
        return EXIT_DRIVER_NOT_LOADED
    if state is DriverState.VERSION_MISMATCH:
        print(VERSION_MISMATCH.format(library=major_minor(host.nvidia_userspace_version())))
        return EXIT_LIBRARY_MISMATCH
    try:
        options = _parse(argv)
    except UsageError as error:
        print(error)
        return EXIT_INVALID_ARGUMENT
    gpus = devices.nvidia_gpus(host)
    selected = _select(gpus, options.get("id"))
    if not selected:
        print(NO_DEVICES)
        return EXIT_NOT_FOUND
    command = options.get("command", "table")
    if command == "query-gpu":
        return run_gpu_query(host, gpus, selected, options["query-gpu"], options.get("format"))
    if command == "query-compute-apps":
        return run_compute_apps_query(options["query-compute-apps"], options.get("format"))
    if command == "query":
        return run_q(host, gpus, selected, options.get("display"))
    if command == "persistence-mode":
        return _set_persistence_mode(host, selected, options["persistence-mode"])
    if command == "gpu-reset":
        return _reset(host, selected, every_gpu="id" not in options)
    output = {
        "table": _table,
        "list": _gpu_list,
        "version": _version,
        "topo": _topology,
        "nvlink": _nvlink_status,
    }[command](host, selected)
    print("\n".join(output))
    return 0


class UsageError(Exception):
    pass


# Options that take a value, by every spelling nvidia-smi accepts.
VALUE_OPTIONS = {
    "-i": "id", "--id": "id",
    "-d": "display", "--display": "display",
    "-pm": "persistence-mode", "--persistence-mode": "persistence-mode",
    "--query-gpu": "query-gpu", "--query-compute-apps": "query-compute-apps",
    "--format": "format",
}
FLAG_OPTIONS = {
    "-q": "query", "--query": "query", "-L": "list", "--list-gpus": "list", "--version": "version",
    "-r": "gpu-reset", "--gpu-reset": "gpu-reset",
}
SUBCOMMANDS = {"topo": ("-m", "--matrix"), "nvlink": ("-s", "--status")}
# Options that choose what nvidia-smi does; at most one of them per run.
COMMAND_OPTIONS = ("query", "list", "version", "query-gpu", "query-compute-apps", "persistence-mode", "gpu-reset")
FORMAT_MISSING = "\"--format=\" switch is missing. Please run 'nvidia-smi -h' for help.\n"


def _parse(argv: list[str]) -> dict[str, str]:
    """nvidia-smi's grammar: `-x value`, `--long=value` or `--long value`; one command at a time."""
    options: dict[str, str] = {}
    arguments = list(argv)
    if arguments and arguments[0] in SUBCOMMANDS:
        subcommand = arguments.pop(0)
        if not any(flag in arguments for flag in SUBCOMMANDS[subcommand]):
            raise UsageError(INVALID_ARGUMENTS)
        arguments = [argument for argument in arguments if argument not in SUBCOMMANDS[subcommand]]
        options["command"] = subcommand
    while arguments:
        argument = arguments.pop(0)
        name, has_value, value = argument.partition("=")
        if name in VALUE_OPTIONS:
            if not has_value:
                if not arguments:
                    raise UsageError(MISSING_VALUE.format(option=name))
                value = arguments.pop(0)
            key = VALUE_OPTIONS[name]
        elif name in FLAG_OPTIONS and not has_value:
            key, value = FLAG_OPTIONS[name], ""
        else:
            raise UsageError(UNKNOWN_OPTION.format(option=argument))
        if key in COMMAND_OPTIONS:
            if "command" in options:
                raise UsageError(INVALID_ARGUMENTS)
            options["command"] = key
        options[key] = value
    if options.get("command") in ("query-gpu", "query-compute-apps") and "format" not in options:
        raise UsageError(FORMAT_MISSING)
    if "display" in options and options.get("command") != "query":
        raise UsageError(INVALID_ARGUMENTS)
    return options


def _select(gpus: list[NvidiaGpu], wanted: str | None) -> list[NvidiaGpu]:
    """`-i` takes indexes, UUIDs or PCI bus ids, comma-separated; nothing when one names no GPU."""
    if wanted is None:
        return gpus
    selected = []
    for identifier in wanted.split(","):
        matches = [gpu for gpu in gpus if identifier in (str(gpu.index), gpu.uuid, gpu.pci.nvidia)]
        if not matches:
            return []
        selected.extend(matches)
    return selected


def _table(host: SimHost, gpus: list[NvidiaGpu]) -> list[str]:
    driver = host.nvidia_module_version()
    persistence = "On" if host.persistence_mode() else "Off"
    lines = [
        devices.ctime() + TIMESTAMP_TRAILER,
        TABLE_RULE,
        TABLE_HEADER.format(smi=host.nvidia_userspace_version(), driver=driver, cuda=cuda_version(driver)),
        GPU_RULE,
        *GPU_COLUMNS,
    ]
    for gpu in gpus:
        name = gpu.name if len(gpu.name) <= NAME_WIDTH else gpu.name[:NAME_CUT] + "..."
        lines += [
            GPU_ROW_IDENTITY.format(index=gpu.index, name=name, persistence=persistence,
                                    bus_id=gpu.pci.nvidia, display="Off", ecc=0),
            GPU_ROW_READINGS.format(
                fan="N/A", temperature=gpu.temperature_c, pstate=gpu.pstate, usage=f"{int(gpu.power_draw_w)}W",
                cap=int(gpu.power_limit_w), used=gpu.memory_used_mib, total=gpu.memory_total_mib,
                utilization=f"{gpu.utilization_percent}%", compute="Default",
            ),
            GPU_ROW_MIG.format(mig="Disabled"),
            GPU_RULE,
        ]
    return lines + ["", *PROCESSES]


def _gpu_list(host: SimHost, gpus: list[NvidiaGpu]) -> list[str]:
    return [GPU_LIST_LINE.format(index=gpu.index, name=gpu.name, uuid=gpu.uuid) for gpu in gpus]


def _version(host: SimHost, gpus: list[NvidiaGpu]) -> list[str]:
    library, driver = host.nvidia_userspace_version(), host.nvidia_module_version()
    values = {"smi": library, "nvml": major_minor(library), "driver": driver, "cuda": cuda_version(driver)}
    return [line.format(**values) for line in VERSION_LINES]


def _set_persistence_mode(host: SimHost, gpus: list[NvidiaGpu], requested: str) -> int:
    enable = {"1": True, "ENABLED": True, "0": False, "DISABLED": False}.get(requested.upper())
    if enable is None:
        print(INVALID_ARGUMENTS)
        return EXIT_INVALID_ARGUMENT
    if not running_as_root():
        print(PERSISTENCE_NOT_ROOT.format(bus_id=gpus[0].pci.nvidia))
        print(TERMINATING)
        return EXIT_NO_PERMISSION
    current = host.persistence_mode()
    for gpu in gpus:
        if current == enable:
            print(PERSISTENCE_UNCHANGED.format(state="Enabled" if enable else "Disabled", bus_id=gpu.pci.nvidia))
        else:
            print((PERSISTENCE_ENABLED if enable else PERSISTENCE_DISABLED).format(bus_id=gpu.pci.nvidia))
    flag = host.path(LEGACY_PERSISTENCE_FLAG)
    if enable:
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()
    else:
        flag.unlink(missing_ok=True)
    print(ALL_DONE)
    return 0


def running_as_root() -> bool:
    return os.geteuid() == 0


def _reset(host: SimHost, gpus: list[NvidiaGpu], every_gpu: bool) -> int:
    """Reset GPUs: refused unless root and no other client holds them; a reset activates pending row remaps.

    The simulated GPUs run no compute processes (--query-compute-apps is empty); the clients that hold
    them open are the daemons: nvidia-persistenced (while it runs) and nv-hostengine (nvidia-dcgm), each
    holding every GPU. Fabric manager is not counted: whether it holds a GPU against a reset is not on record.
    """
    reason = None
    if not running_as_root():
        reason = RESET_NO_PERMISSION
    elif gpu_clients(host):
        reason = RESET_IN_USE
    if reason:
        print(RESET_FAILED)
        print("\n".join(RESET_FAILED_GPU.format(bus_id=gpu.pci.nvidia, reason=reason) for gpu in gpus))
        if reason == RESET_IN_USE:
            plural = len(gpus) > 1
            print()
            print(RESET_IN_USE_HINT.format(count=len(gpus), devices="devices are" if plural else "device is",
                                           these="these devices" if plural else "this device"))
        return EXIT_NO_PERMISSION if reason == RESET_NO_PERMISSION else EXIT_RESET_FAILED
    hardware = host.hardware()
    if devices.activate_pending_remaps(hardware, {gpu.hardware_index for gpu in gpus}):
        host.write_hardware(hardware)
    for gpu in gpus:
        print(RESET_DONE.format(bus_id=gpu.pci.nvidia))
    if every_gpu and hardware.get("nvswitches"):
        print(RESET_NVSWITCH_NOTE)
    print(ALL_DONE)
    return 0


def gpu_clients(host: SimHost) -> list[str]:
    """The processes besides nvidia-smi that hold the GPUs open (each of the simulated ones holds all)."""
    clients = []
    if host.persistenced_running():
        clients.append("nvidia-persistenced")
    try:
        socket.create_connection(HOSTENGINE_ADDRESS, timeout=HOSTENGINE_PROBE_TIMEOUT_S).close()
        clients.append("nv-hostengine")
    except OSError:
        pass
    return clients


@dataclass(frozen=True)
class _Endpoint:
    """A column of the topology matrix: a GPU or a NIC, where it sits on PCIe and which socket."""

    name: str
    address: PciAddress
    numa_node: int
    switch: str | None  # the PCIe switch it sits behind
    gpu: NvidiaGpu | None = None


def _topology(host: SimHost, gpus: list[NvidiaGpu]) -> list[str]:
    """The GPU/NIC connection matrix; NICs are the host's RDMA devices (mlx5_*), in index order."""
    hardware = host.hardware()
    nics = sorted(hardware["nics"], key=lambda nic: int(nic["name"].rsplit("_", 1)[1]))
    endpoints = [_Endpoint(f"GPU{gpu.index}", gpu.pci, gpu.numa_node, gpu.pcie_switch, gpu)
                 for gpu in gpus]
    for number, nic in enumerate(nics):
        endpoints.append(_Endpoint(f"NIC{number}", PciAddress.parse(nic["pci_bus_id"]), nic["numa_node"],
                                   nic.get("pcie_switch")))
    header = "\t".join([endpoint.name for endpoint in endpoints] + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = ["\t" + (UNDERLINE + header + RESET if sys.stdout.isatty() else header)]
    for endpoint in endpoints:
        cells = [TOPO_SELF if other is endpoint else _connection(endpoint, other) for other in endpoints]
        if endpoint.gpu is None:
            affinity = ["", "", "", ""]
        else:
            numa = endpoint.numa_node
            affinity = [cpu_affinity(hardware, numa), numa_affinity(hardware, numa), "", "N/A"]
        lines.append("\t".join([endpoint.name, *cells, *affinity]))
    lines += TOPO_LEGEND
    if nics:
        lines += ["", "NIC Legend:", "", *(f"  NIC{number}: {nic['name']}" for number, nic in enumerate(nics)), ""]
    return lines


def _connection(one: _Endpoint, other: _Endpoint) -> str:
    """How two devices reach each other: bonded NVLinks, else PCIe by switch, host bridge and socket."""
    if one.gpu is not None and other.gpu is not None:
        links = min(one.gpu.active_nvlinks, other.gpu.active_nvlinks)
        if links:
            return f"NV{links}"
    same_switch = one.switch is not None and one.switch == other.switch
    same_adapter = (one.address.domain, one.address.bus) == (other.address.domain, other.address.bus)
    if same_switch or same_adapter:
        return "PIX"
    if one.numa_node == other.numa_node and one.address.domain == other.address.domain:
        return "NODE"
    return "SYS"


def _nvlink_status(host: SimHost, gpus: list[NvidiaGpu]) -> list[str]:
    lines = []
    for gpu in gpus:
        lines.append(GPU_LIST_LINE.format(index=gpu.index, name=gpu.name, uuid=gpu.uuid))
        lines += [NVLINK_LINK.format(link=link, state=NVLINK_INACTIVE if speed is None else f"{speed:g} GB/s")
                  for link, speed in enumerate(gpu.nvlink_speeds)]
    return lines
