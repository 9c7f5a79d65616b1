"""Facts about block devices, software RAID and mounts: what the model cache volume is built from."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString
from pyinfra.api.command import make_formatted_string_command
from typing_extensions import override

MDSTAT_ARRAY_REGEX = r"^(?P<name>md\S+) : (?P<state>\S+)(?: \(\S+\))? (?P<level>raid\d+|linear) (?P<members>.+)$"
MDSTAT_MEMBER_REGEX = r"(?P<device>[^\s\[]+)\[\d+\](?:\((?P<flag>\w)\))?"
NO_MD_MARKER = "K3OPS_NO_MDSTAT"
BLOCK_DEVICE_MARKER = "K3OPS_BLOCK_DEVICE"
MDADM_CONF = "/etc/mdadm/mdadm.conf"


class BlockDeviceSignature(FactBase[dict[str, str] | None]):
    """
    Returns what a device holds, probed on the device itself (``blkid -p``, no cache): ``{}`` when it
    holds no filesystem or RAID signature, ``None`` when there is no such block device:

    .. code:: python

        {"type": "xfs", "uuid": "5f3c...", "label": "k3ops-models", "usage": "filesystem"}
    """

    @override
    def command(self, device: str):
        # A marker line first, since pyinfra reads no output as "no fact"; blkid exits 2 when it finds
        # no signature, which is an answer, not an error.
        return make_formatted_string_command(
            "if [ -b {0} ]; then echo " + BLOCK_DEVICE_MARKER + "; blkid -p -o export {0} || [ $? -eq 2 ]; fi",
            QuoteString(device))

    @override
    def requires_command(self, device: str) -> str:
        return "blkid"

    @override
    def process(self, output):
        if BLOCK_DEVICE_MARKER not in (line.strip() for line in output):
            return None
        signature = {}
        for line in output:
            key, _, value = line.strip().partition("=")
            if value and key != "DEVNAME":
                signature[key.lower()] = value
        return signature


class MdArrays(FactBase[dict]):
    """
    Returns whether the kernel has the md (software RAID) driver, and its arrays from /proc/mdstat:

    .. code:: python

        {"md_driver": True,
         "arrays": {"md127": {"state": "active", "level": "raid0", "devices": ["nvme0n1", "nvme1n1"], "failed": []}}}
    """

    command = f"cat /proc/mdstat 2>/dev/null || echo {NO_MD_MARKER}"

    @override
    def process(self, output):
        if any(line.strip() == NO_MD_MARKER for line in output):
            return {"md_driver": False, "arrays": {}}
        arrays = {}
        for line in output:
            array = re.match(MDSTAT_ARRAY_REGEX, line.rstrip())
            if array:
                members = list(re.finditer(MDSTAT_MEMBER_REGEX, array["members"]))
                arrays[array["name"]] = {
                    "state": array["state"],
                    "level": array["level"],
                    "devices": sorted(member["device"] for member in members),
                    "failed": sorted(member["device"] for member in members if member["flag"] == "F"),
                }
        return {"md_driver": True, "arrays": arrays}


class MdadmConfArrays(FactBase[dict[str, dict[str, str]]]):
    """
    Returns the arrays /etc/mdadm/mdadm.conf names (what the initramfs and udev assemble at boot, and under
    which name), by device, with their identity:

    .. code:: python

        {"/dev/md/k3ops-models": {"metadata": "1.2", "uuid": "3aaa0122:29827cfa:5331ad66:ca767371",
                                  "name": "gpu-01:k3ops-models"}}
    """

    command = f"grep -s -E '^ARRAY[[:space:]]' {MDADM_CONF} || true"
    default = dict

    @override
    def process(self, output):
        arrays = {}
        for line in output:
            words = line.split()
            if len(words) > 1 and words[0] == "ARRAY":
                arrays[words[1]] = {key.lower(): value for key, _, value in
                                    (word.partition("=") for word in words[2:]) if value}
        return arrays


class MountedFilesystem(FactBase[dict[str, str] | None]):
    """
    Returns what is mounted at a path (``None`` when nothing is):

    .. code:: python

        {"source": "/dev/nvme0n1", "fstype": "xfs", "uuid": "5f3c...", "options": "rw,noatime,..."}
    """

    @override
    def command(self, path: str):
        return make_formatted_string_command(
            "findmnt --noheadings --pairs --output SOURCE,FSTYPE,UUID,OPTIONS --mountpoint {0} || true",
            QuoteString(path))

    @override
    def requires_command(self, path: str) -> str:
        return "findmnt"

    @override
    def process(self, output):
        mounts = [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in output]
        mounts = [mount for mount in mounts if mount]
        # Mounts stacked on one path are listed oldest first; the last one is what the path shows.
        return {key.lower(): value for key, value in mounts[-1].items()} if mounts else None
