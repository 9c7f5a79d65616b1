"""Facts about the host's network: what listens where, and the NICs that can do RDMA."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

from .util import pci_bus_ids, pci_functions_command

# NVIDIA (Mellanox) ConnectX and BlueField adapters: every one speaks RDMA, over InfiniBand (PCI class
# 0207) or Ethernet as RoCE (0200).
RDMA_NIC_VENDORS = ("0x15b3",)
RDMA_NIC_CLASSES = ("0x0207", "0x0200")
# One line of `ss -Hltn`: state, receive and send queues, local address:port, peer address:port.
SS_LISTEN_REGEX = r"^LISTEN\s+\d+\s+\d+\s+(?P<address>\S+):(?P<port>\d+)\s"


class ListeningAddresses(FactBase[list[str]]):
    """
    Returns the local addresses with a TCP socket listening on a port (IPv6 without brackets,
    ``*`` or ``0.0.0.0``/``::`` for every address):

    .. code:: python

        ["10.213.7.11"]
    """

    @override
    def command(self, port: int):
        return f"ss -Hltn sport = :{int(port)}"

    @override
    def requires_command(self, port: int) -> str:
        return "ss"

    default = list

    @override
    def process(self, output):
        return [listening["address"].strip("[]") for line in output if (listening := re.match(SS_LISTEN_REGEX, line))]


class RdmaNics(FactBase[list[str]]):
    """
    Returns the PCI bus ids of the host's RDMA NICs (InfiniBand or RoCE), read from sysfs so that it
    needs neither a driver's tool nor the RDMA stack loaded:

    .. code:: python

        ["0000:19:00.0", "0000:2b:00.0"]
    """

    command = pci_functions_command(RDMA_NIC_VENDORS, RDMA_NIC_CLASSES)

    default = list

    @override
    def process(self, output):
        return pci_bus_ids(output)
