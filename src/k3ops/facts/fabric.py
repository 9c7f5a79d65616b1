"""Facts the fabric pre-checks read: RDMA ports and MTUs, PCIe ACS, XGMI links (the GPUs' NVLink fabric registration
is in NvidiaGpuReport, with the rest of nvidia-smi's report)."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

from .util import PCI_BUS_ID_REGEX

# `ibstat`: "CA 'mlx5_0'", then per port "\tPort 1:" and its "\t\tState: Active" lines.
IBSTAT_CA_REGEX = r"^CA '(?P<device>[^']+)'$"
IBSTAT_PORT_REGEX = r"^\s+Port (?P<port>\d+):$"
IBSTAT_FIELD_REGEX = r"^\s+(?P<label>State|Physical state|Rate|Link layer): (?P<value>.+?)\s*$"
IBSTAT_FIELDS = {"State": "state", "Physical state": "physical_state", "Rate": "rate_gbps", "Link layer": "link_layer"}
# `ibv_devinfo`: "hca_id:\tmlx5_0", then per port "\t\t\tactive_mtu:\t\t4096 (5)".
DEVINFO_HCA_REGEX = r"^hca_id:\s+(?P<device>\S+)"
DEVINFO_ACTIVE_MTU_REGEX = r"^\s+active_mtu:\s+(?P<mtu>\d+)"
# `lspci -D -vvv`: a device's first line starts at column 0 with its bus id, its capabilities below.
LSPCI_DEVICE_REGEX = r"^(?P<bus_id>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (?P<description>.*)$"
LSPCI_BRIDGE = "PCI bridge:"
LSPCI_SOURCE_VALIDATION_REGEX = r"^\s+ACSCtl:\s+SrcValid\+"
# Without root the kernel shows only the first 64 bytes of config space, and lspci no capabilities.
LSPCI_ACCESS_DENIED = "Capabilities: <access denied>"
# `amd-smi topology -t`: the table's title, then a header of bus ids, then one row per GPU.
AMD_SMI_LINK_TYPE_TITLE = "LINK TYPE TABLE:"
XGMI = "XGMI"


class InfinibandPorts(FactBase[list[dict]]):
    """
    Returns every port `ibstat` lists (InfiniBand and RoCE alike), in its order:

    .. code:: python

        [{"device": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400,
          "link_layer": "InfiniBand"}]
    """

    # ibstat exits non-zero when the host has no HCA; that is no port, not a failed host.
    command = "ibstat 2>/dev/null || true"

    @override
    def requires_command(self) -> str:
        return "ibstat"

    default = list

    @override
    def process(self, output):
        ports, device = [], None
        for line in output:
            if found := re.match(IBSTAT_CA_REGEX, line):
                device = found["device"]
            elif device and (found := re.match(IBSTAT_PORT_REGEX, line)):
                ports.append({"device": device, "port": int(found["port"])} | dict.fromkeys(IBSTAT_FIELDS.values()))
            elif ports and (found := re.match(IBSTAT_FIELD_REGEX, line)):
                value = found["value"]
                if found["label"] == "Rate":
                    value = float(value) if "." in value else int(value)  # SDR's 2.5 Gb/s a lane
                ports[-1][IBSTAT_FIELDS[found["label"]]] = value
        return ports


class InfinibandActiveMtu(FactBase[dict[str, int]]):
    """
    Returns each RDMA device's active MTU in bytes, as verbs reports it (the smallest of its ports'):

    .. code:: python

        {"mlx5_0": 4096, "mlx5_1": 4096}
    """

    command = "ibv_devinfo 2>/dev/null || true"

    @override
    def requires_command(self) -> str:
        return "ibv_devinfo"

    default = dict

    @override
    def process(self, output):
        mtus, device = {}, None
        for line in output:
            if found := re.match(DEVINFO_HCA_REGEX, line):
                device = found["device"]
            elif device and (found := re.match(DEVINFO_ACTIVE_MTU_REGEX, line)):
                mtus[device] = min(int(found["mtu"]), mtus.get(device, int(found["mtu"])))
        return mtus


class AcsEnabledBridges(FactBase[list[str]]):
    """
    Returns the PCI bridges with ACS source validation on (which routes peer-to-peer traffic between
    GPUs and NICs up through the root complex); needs root to read the capabilities:

    .. code:: python

        ["0000:00:01.0", "0000:16:00.0"]
    """

    command = "lspci -D -vvv 2>/dev/null || true"

    @override
    def requires_command(self) -> str:
        return "lspci"

    default = list

    @override
    def process(self, output):
        if any(LSPCI_ACCESS_DENIED in line for line in output):
            raise FactProcessError("lspci could not read the PCI capabilities (not root): the ACS state needs "
                                   "the fact run as root (_sudo=True)")
        bridges, bridge = [], None
        for line in output:
            if found := re.match(LSPCI_DEVICE_REGEX, line):
                bridge = found["bus_id"] if found["description"].startswith(LSPCI_BRIDGE) else None
            elif bridge and re.match(LSPCI_SOURCE_VALIDATION_REGEX, line):
                bridges.append(bridge)
        return bridges


class XgmiLinks(FactBase[dict]):
    """
    Returns the AMD GPUs' bus ids in amd-smi's order (a GPU's position is its amd-smi id) and each pair
    of GPUs whose link is not XGMI, as ``[gpu, peer, link type]`` with the lower id first:

    .. code:: python

        {"gpus": ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0"], "not_xgmi": [[0, 2, "PCIE"]]}
    """

    # amd-smi exits non-zero without a loaded amdgpu; the check asks AmdgpuModule about that.
    command = "amd-smi topology -t 2>/dev/null || true"

    @override
    def requires_command(self) -> str:
        return "amd-smi"

    @staticmethod
    def default():
        return {"gpus": [], "not_xgmi": []}

    @override
    def process(self, output):
        lines = [line.split() for line in output]
        title = next((number for number, line in enumerate(output) if line.strip() == AMD_SMI_LINK_TYPE_TITLE), None)
        if title is None or title + 1 >= len(lines):
            return self.default()
        gpus = [bus_id.lower() for bus_id in lines[title + 1]]
        not_xgmi = []
        for row in lines[title + 2:]:
            if not row or not re.match(PCI_BUS_ID_REGEX, row[0].lower()):
                break
            gpu = gpus.index(row[0].lower())
            not_xgmi += [[gpu, peer, kind] for peer, kind in enumerate(row[1:]) if peer > gpu and kind != XGMI]
        return {"gpus": gpus, "not_xgmi": not_xgmi}
