"""Simulated `ibstat` (infiniband-diags) and `ibv_devinfo` (ibverbs-utils) for the lab's HCAs.

Both read the same port attributes, worked out once per NIC from hardware.json: a NIC may carry
`"port_state"` ("Active" by default; "Down", "Initializing" or "Armed" as a fault) and
`"physical_state"` (for a Down port: "Polling", a cable with nobody on the other end, by default,
or "Disabled"). Output follows the tools' printf formats, tabs included.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from .host import SimHost

MELLANOX_VENDOR_ID = 0x02C9  # the IEEE OUI mlx5 devices report to verbs
HARDWARE_VERSION = 0
PORT_NUMBER = 1
# Port states as the IB spec numbers them, with ibstat's and verbs' names.
PORT_STATES = {"Down": 1, "Initializing": 2, "Armed": 3, "Active": 4}
VERBS_PORT_STATES = {1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}
DEFAULT_DOWN_PHYSICAL_STATE = "Polling"
LINKED_PHYSICAL_STATE = "LinkUp"
DOWN_RATE = 10
UNASSIGNED_LID = 65535
SM_LID = 1
UNICAST_LIDS = 0xBFFF
IB_CAPABILITY_MASK = 0xA751E848
ROCE_CAPABILITY_MASK = 0x00010000
MTU_CODES = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
MAX_MTU = 4096
ROCE_ACTIVE_MTU = 1024  # what a 1500-byte netdev MTU leaves for RoCE

CA_HEADER = "CA '{name}'"
CA_FIELDS = (
    "\tCA type: {ca_type}\n\tNumber of ports: 1\n\tFirmware version: {fw_version}\n"
    "\tHardware version: {hw_version}\n\tNode GUID: 0x{node_guid:016x}\n\tSystem image GUID: 0x{node_guid:016x}"
)
PORT_FIELDS = (
    "{hdr}Port {port}:\n{pre}State: {state}\n{pre}Physical state: {physical_state}\n{pre}Rate: {rate}\n"
    "{pre}Base lid: {base_lid}\n{pre}LMC: 0\n{pre}SM lid: {sm_lid}\n{pre}Capability mask: 0x{capability_mask:08x}\n"
    "{pre}Port GUID: 0x{port_guid:016x}\n{pre}Link layer: {link_layer}"
)
IBSTAT_NOT_FOUND = "ibpanic: [{pid}] main: '{name}' IB device can't be found: No such file or directory"

DEVINFO_BLOCK = (
    "hca_id:\t{name}\n"
    "\ttransport:\t\t\tInfiniBand (0)\n"
    "\tfw_ver:\t\t\t\t{fw_version}\n"
    "\tnode_guid:\t\t\t{verbs_guid}\n"
    "\tsys_image_guid:\t\t\t{verbs_guid}\n"
    "\tvendor_id:\t\t\t0x{vendor_id:04x}\n"
    "\tvendor_part_id:\t\t\t{vendor_part_id}\n"
    "\thw_ver:\t\t\t\t0x{hw_version:X}\n"
    "\tboard_id:\t\t\t{board_id}\n"
    "\tphys_port_cnt:\t\t\t1\n"
    "\t\tport:\t{port}\n"
    "\t\t\tstate:\t\t\t{verbs_state} ({state_code})\n"
    "\t\t\tmax_mtu:\t\t{max_mtu} ({max_mtu_code})\n"
    "\t\t\tactive_mtu:\t\t{active_mtu} ({active_mtu_code})\n"
    "\t\t\tsm_lid:\t\t\t{sm_lid}\n"
    "\t\t\tport_lid:\t\t{base_lid}\n"
    "\t\t\tport_lmc:\t\t0x00\n"
    "\t\t\tlink_layer:\t\t{link_layer}\n"
)
DEVINFO_LIST = "{count} HCA{plural} found:\n{names}"
DEVINFO_NOT_FOUND = "IB device '{name}' wasn't found"
DEVINFO_NO_DEVICES = "No IB devices found"
FAILURE_STATUS = 255


@dataclass(frozen=True)
class Port:
    """One HCA port's attributes, as umad (ibstat) and verbs (ibv_devinfo) both report them."""

    name: str
    ca_type: str
    fw_version: str
    board_id: str
    vendor_part_id: int
    node_guid: int
    port_guid: int
    link_layer: str
    state: str
    physical_state: str
    rate: int
    base_lid: int
    sm_lid: int
    capability_mask: int
    active_mtu: int

    @property
    def state_code(self) -> int:
        return PORT_STATES[self.state]


def hca_ports(host: SimHost) -> list[Port]:
    """The host's HCAs in the order the kernel registered them."""
    return [_port(nic) for nic in host.hardware()["nics"]]


def _port(nic: dict) -> Port:
    node_guid = int(nic["node_guid"], 16)
    state = nic.get("port_state", "Active")
    infiniband = nic["link_layer"] == "InfiniBand"
    active = state == "Active"
    if state == "Down":
        physical_state = nic.get("physical_state", DEFAULT_DOWN_PHYSICAL_STATE)
    else:
        physical_state = LINKED_PHYSICAL_STATE
    if not infiniband:
        base_lid = sm_lid = 0
    elif active:
        base_lid, sm_lid = 1 + node_guid % UNICAST_LIDS, SM_LID
    else:
        base_lid, sm_lid = UNASSIGNED_LID, 0
    return Port(
        name=nic["name"], ca_type=nic["ca_type"], fw_version=nic["fw_version"], board_id=nic["board_id"],
        vendor_part_id=int(nic["pci_device_id"], 16), node_guid=node_guid,
        port_guid=node_guid if infiniband else roce_port_guid(node_guid), link_layer=nic["link_layer"],
        state=state, physical_state=physical_state, rate=DOWN_RATE if state == "Down" else nic["rate_gbps"],
        base_lid=base_lid, sm_lid=sm_lid,
        capability_mask=IB_CAPABILITY_MASK if infiniband else ROCE_CAPABILITY_MASK,
        active_mtu=MAX_MTU if infiniband else ROCE_ACTIVE_MTU,
    )


def roce_port_guid(node_guid: int) -> int:
    """A RoCE port's GUID is the modified EUI-64 of its MAC, which mlx5 takes from the node GUID."""
    raw = node_guid.to_bytes(8, "big")
    mac = raw[:3] + raw[5:]
    return int.from_bytes(bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:], "big")


# --- ibstat -------------------------------------------------------------------------------------

def ibstat_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost("/")
    parser = argparse.ArgumentParser(prog="ibstat")
    parser.add_argument("-l", "--list_of_cas", action="store_true", help="list all IB devices")
    parser.add_argument("-p", "--port_list", action="store_true", help="show port list")
    parser.add_argument("ca_name", nargs="?")
    parser.add_argument("portnum", nargs="?", type=lambda value: int(value, 0))
    args = parser.parse_args(argv)
    ports = sorted(hca_ports(host), key=lambda port: port.name)
    if args.ca_name:
        ports = [port for port in ports if port.name == args.ca_name]
        if not ports:
            print(IBSTAT_NOT_FOUND.format(pid=os.getpid(), name=args.ca_name), file=sys.stderr)
            return FAILURE_STATUS
    for port in ports:
        if args.port_list:
            print(f"0x{port.port_guid:016x}")
        elif args.list_of_cas:
            print(port.name)
        elif args.portnum is not None:
            print(f"CA: '{port.name}'")
            print(_port_fields(port, nested=False))
        else:
            print(CA_HEADER.format(name=port.name))
            print(CA_FIELDS.format(ca_type=port.ca_type, fw_version=port.fw_version,
                                   hw_version=HARDWARE_VERSION, node_guid=port.node_guid))
            print(_port_fields(port, nested=True))
    return 0


def _port_fields(port: Port, nested: bool) -> str:
    return PORT_FIELDS.format(
        hdr="\t" if nested else "", pre="\t\t" if nested else "", port=PORT_NUMBER, state=port.state,
        physical_state=port.physical_state, rate=port.rate, base_lid=port.base_lid, sm_lid=port.sm_lid,
        capability_mask=port.capability_mask, port_guid=port.port_guid, link_layer=port.link_layer)


# --- ibv_devinfo --------------------------------------------------------------------------------

def ibv_devinfo_main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost("/")
    parser = argparse.ArgumentParser(prog="ibv_devinfo")
    parser.add_argument("-d", "--ib-dev", dest="device", help="use IB device <dev>")
    parser.add_argument("-l", "--list", action="store_true", help="print only the IB devices names")
    args = parser.parse_args(argv)
    ports = hca_ports(host)
    if args.list:
        names = "".join(f"\t{port.name}\n" for port in ports)
        print(DEVINFO_LIST.format(count=len(ports), plural="" if len(ports) == 1 else "s", names=names))
        return 0
    if args.device:
        ports = [port for port in ports if port.name == args.device]
        if not ports:
            print(DEVINFO_NOT_FOUND.format(name=args.device), file=sys.stderr)
            return FAILURE_STATUS
    elif not ports:
        print(DEVINFO_NO_DEVICES, file=sys.stderr)
        return FAILURE_STATUS
    for port in ports:
        print(DEVINFO_BLOCK.format(
            name=port.name, fw_version=port.fw_version, verbs_guid=_verbs_guid(port.node_guid),
            vendor_id=MELLANOX_VENDOR_ID, vendor_part_id=port.vendor_part_id, hw_version=HARDWARE_VERSION,
            board_id=port.board_id, port=PORT_NUMBER, verbs_state=VERBS_PORT_STATES[port.state_code],
            state_code=port.state_code, max_mtu=MAX_MTU, max_mtu_code=MTU_CODES[MAX_MTU],
            active_mtu=port.active_mtu, active_mtu_code=MTU_CODES[port.active_mtu], sm_lid=port.sm_lid,
            base_lid=port.base_lid, link_layer=port.link_layer))
    return 0


def _verbs_guid(guid: int) -> str:
    """libibverbs prints a GUID as four groups of four hex digits: 58a2:e103:002a:09b8."""
    digits = f"{guid:016x}"
    return ":".join(digits[i:i + 4] for i in range(0, 16, 4))
