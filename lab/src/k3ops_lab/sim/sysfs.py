"""The hardware layer that real tools read: PCI devices in sysfs and the SMBIOS tables.

A lab host's boot layer mounts tmpfs on /sys/bus/pci and /sys/firmware and fills them from
hardware.json with these functions, so the unmodified Debian `lspci` and `dmidecode` (and anything
else that reads sysfs) see the simulated machine. Faults written into hardware.json show here too:
a GPU fallen off the bus answers config reads with all ones, and `pcie_acs_enabled` switches the
Access Control Services of every root and switch downstream port (HGX hosts ship with it off so
that GPUs and NICs behind one switch talk peer to peer).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# --- PCI ----------------------------------------------------------------------------------------

CONFIG_SIZE_CONVENTIONAL = 256
CONFIG_SIZE_EXPRESS = 4096
CAP_POWER_MANAGEMENT = 0x01
CAP_EXPRESS = 0x10
EXT_CAP_ACS = 0x000D
PM_OFFSET = 0x40
EXPRESS_OFFSET = 0x60
EXT_CAP_OFFSET = 0x100
EXPRESS_VERSION = 2
# PCI Express device/port types (PCIe Capabilities register bits 7:4)
ENDPOINT, ROOT_PORT, UPSTREAM_PORT, DOWNSTREAM_PORT = 0x0, 0x4, 0x5, 0x6
COMMAND_MEMORY_BUSMASTER = 0x0006
PM_CAPABILITIES, PM_CONTROL = 0x0003, 0x0008  # version 3; D0 with NoSoftRst+
EXPRESS_SLOT_IMPLEMENTED = 1 << 8
# DevCap: MaxPayload 512, ExtTag, unlimited L0s/L1 latency, role-based errors; endpoints add FLR
DEVICE_CAPABILITIES = 0x2 | 1 << 5 | 7 << 6 | 7 << 9 | 1 << 15
DEVICE_CAPABILITY_FLR = 1 << 28
DEVICE_CONTROL = 0x2130  # RlxdOrd+ ExtTag+, MaxPayload 256, MaxReadReq 512
LINK_CAPABILITIES_PORT = 7 << 19  # Surprise+ LLActRep+ BwNot+
LINK_CONTROL = 0x0040  # CommClk+
LINK_STATUS_SLOT_CLOCK, LINK_STATUS_DL_ACTIVE = 1 << 12, 1 << 13
DISABLED_WINDOW = (0xFFF0_0000, 0)  # base above limit
PREFETCH_WINDOW_64BIT = 0x1
INTERRUPT_PIN_A = 1
STATUS_CAP_LIST = 0x0010
HEADER_TYPE_BRIDGE = 0x01
# ACS capability bits: SrcValid TransBlk ReqRedir CmpltRedir UpstreamFwd EgressCtrl DirectTrans
ACS_CAP_DOWNSTREAM_PORT = 0x005F
ACS_CAP_ROOT_PORT = 0x001F
# What Linux turns on when ACS is enabled (SrcValid ReqRedir CmpltRedir UpstreamFwd)
ACS_CTL_ENABLED = 0x001D
ACS_CTL_DISABLED = 0x0000
GT_PER_S = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
LINK_SPEED = "{} GT/s PCIe\n"
PLATFORM_PCIE_GENERATION = 5
# Kernel resource flags as /sys/bus/pci/devices/*/resource shows them
RESOURCE_MEM32 = 0x00040200
RESOURCE_MEM64 = 0x00140204
RESOURCE_MEM64_PREFETCH = 0x0014220C
RESOURCE_WINDOW_MEM = 0x00000200
RESOURCE_WINDOW_PREFETCH = 0x00102201
RESOURCE_LINE = "0x{:016x} 0x{:016x} 0x{:016x}\n"
ENDPOINT_RESOURCE_LINES = 13  # 6 BARs, expansion ROM, 6 SR-IOV BARs
BRIDGE_WINDOW_LINE = 13  # then I/O, memory, prefetchable memory and an unused window
MODALIAS = "pci:v{vendor:08X}d{device:08X}sv{sv:08X}sd{sd:08X}bc{cls:02X}sc{sub:02X}i{prog:02X}\n"
MMIO32_START = 0x9000_0000
MMIO64_START = 0x2000_0000_0000
BRIDGE_WINDOW_ALIGN = 1 << 20
MIB = 1 << 20

CLASS_3D_CONTROLLER = 0x030200
CLASS_PROCESSING_ACCELERATOR = 0x120000
CLASS_BRIDGE_OTHER = 0x068000
CLASS_INFINIBAND = 0x020700
CLASS_ETHERNET = 0x020000
CLASS_NVME = 0x010802
CLASS_HOST_BRIDGE = 0x060000
CLASS_PCI_BRIDGE = 0x060400

NVIDIA_VENDOR, MELLANOX_VENDOR, SAMSUNG_VENDOR = 0x10DE, 0x15B3, 0x144D
BROADCOM_PEX890XX = (0x1000, 0xC030)  # PEX890xx PCIe Gen 5 switch (HGX baseboards, UBB)
PEX89144_SUBSYSTEM = 0x0144
NVSWITCH_SUBSYSTEM = 0x1796
CONNECTX_SUBSYSTEM = 0x0041
NVME_SUBSYSTEM = 0xA813  # General DC NVMe PM9A3
# (generation, width) of the links that are not x16 at the platform's generation
NVSWITCH_LINK = (4, 2)  # the NVSwitch management link
NVME_LINK = (4, 4)
IRQ_BASE = 16

PORT_DRIVER = "pcieport"  # binds every root and switch port the renderer creates


@dataclass(frozen=True)
class RootComplex:
    """The CPU side of the PCI tree: who made it, and whether a host bridge sits at 00:00.0."""

    vendor: int
    host_bridge: int | None
    root_port: int


ROOT_COMPLEXES = {
    "Intel": RootComplex(vendor=0x8086, host_bridge=0x09A2, root_port=0x352A),
    "AMD": RootComplex(vendor=0x1022, host_bridge=0x14A4, root_port=0x14A5),
    "NVIDIA": RootComplex(vendor=NVIDIA_VENDOR, host_bridge=None, root_port=0x22B2),
}


@dataclass(frozen=True)
class Bar:
    index: int
    size: int
    flags: int  # one of the RESOURCE_MEM* kernel flags

    @property
    def prefetchable(self) -> bool:
        return self.flags == RESOURCE_MEM64_PREFETCH

    @property
    def is_64bit(self) -> bool:
        return self.flags != RESOURCE_MEM32


@dataclass
class PciFunction:
    """One PCI function and everything the renderer needs to write its sysfs directory."""

    bus_id: str
    kind: str  # gpu, nvswitch, nic, nvme, bridge, host_bridge
    vendor: int
    device: int
    class_code: int
    subsystem_vendor: int = 0
    subsystem_device: int = 0
    revision: int = 0
    numa_node: int = 0
    port_type: int | None = None  # PCIe device/port type; None for a conventional function
    link_generation: int = PLATFORM_PCIE_GENERATION  # what the link can do (LnkCap)
    link_width: int = 16
    trained: tuple[int, int] | None = None  # (generation, width) the link came up at (LnkSta)
    bars: tuple[Bar, ...] = ()
    secondary_bus: int = 0
    subordinate_bus: int = 0
    acs_enabled: bool = False
    upstream_switch: str | None = None  # bus id of the PCIe switch this endpoint sits behind
    unreachable: bool = False  # fallen off the bus: config reads return all ones
    children: list[PciFunction] = field(default_factory=list)
    addresses: dict[int, int] = field(default_factory=dict)  # BAR index -> assigned address
    windows: dict[str, tuple[int, int]] = field(default_factory=dict)  # "mem"/"prefetch" -> (base, limit)

    @property
    def domain(self) -> int:
        return int(self.bus_id.split(":")[0], 16)

    @property
    def bus(self) -> int:
        return int(self.bus_id.split(":")[1], 16)

    @property
    def is_bridge(self) -> bool:
        return self.class_code == CLASS_PCI_BRIDGE

    @property
    def link_status(self) -> tuple[int, int]:
        return self.trained or (self.link_generation, self.link_width)

    def subtree(self) -> list[PciFunction]:
        return [self] + [node for child in self.children for node in child.subtree()]


def render_pci_devices(hardware: dict, devices_dir: Path, drivers: dict[str, str] | None = None) -> None:
    """Write one directory per PCI function under `devices_dir` (/sys/bus/pci/devices).

    `drivers` maps a device's bus id to the kernel driver bound to it (mlx5_core, nvme, and nvidia
    or amdgpu once loaded); the root and switch ports, which only this renderer knows, are bound to
    pcieport. Rendering again replaces what an earlier call wrote.
    """
    functions = pci_functions(hardware)
    bound = {fn.bus_id: PORT_DRIVER for fn in functions if fn.is_bridge} | (drivers or {})
    drivers_dir = devices_dir.parent / "drivers"
    _clear_driver_links(drivers_dir)
    for fn in functions:
        directory = devices_dir / fn.bus_id
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in _attribute_files(fn).items():
            (directory / name).write_text(content)
        (directory / "config").write_bytes(config_space(fn))
        driver = bound.get(fn.bus_id)
        if driver:
            (drivers_dir / driver).mkdir(parents=True, exist_ok=True)
            (directory / "driver").symlink_to(f"../../drivers/{driver}")
            (drivers_dir / driver / fn.bus_id).symlink_to(f"../../devices/{fn.bus_id}")


def pci_functions(hardware: dict) -> list[PciFunction]:
    """Every PCI function of the host in bus order: root complex, switches, endpoints."""
    endpoints = _endpoints(hardware)
    attachments = _attach_to_switches(endpoints, hardware)
    complex_ = _root_complex(hardware["cpu_model"])
    roots = _root_ports(attachments, complex_, hardware.get("pcie_acs_enabled", False))
    _train_links(roots)
    _assign_addresses(roots)
    functions = [node for root in roots for node in root.subtree()]
    if complex_.host_bridge is not None:
        for domain in sorted({fn.domain for fn in functions}):
            functions.append(PciFunction(
                bus_id=f"{domain:04x}:00:00.0", kind="host_bridge", vendor=complex_.vendor,
                device=complex_.host_bridge, class_code=CLASS_HOST_BRIDGE, revision=0x20))
    return sorted(functions, key=lambda fn: fn.bus_id)


def _endpoints(hardware: dict) -> list[PciFunction]:
    endpoints = []
    model = hardware.get("gpu_model")
    for gpu in hardware["gpus"]:
        endpoints.append(_gpu_function(model, gpu))
    for switch in hardware["nvswitches"]:
        endpoints.append(PciFunction(
            bus_id=switch["pci_bus_id"], kind="nvswitch", vendor=NVIDIA_VENDOR,
            device=int(switch["pci_device_id"], 16), class_code=CLASS_BRIDGE_OTHER, subsystem_vendor=NVIDIA_VENDOR,
            subsystem_device=NVSWITCH_SUBSYSTEM, revision=0xA1, port_type=ENDPOINT,
            link_generation=NVSWITCH_LINK[0], link_width=NVSWITCH_LINK[1],
            bars=(Bar(0, 32 * MIB, RESOURCE_MEM64),)))
    for nic in hardware["nics"]:
        endpoints.append(PciFunction(
            bus_id=nic["pci_bus_id"], kind="nic", vendor=MELLANOX_VENDOR, device=int(nic["pci_device_id"], 16),
            class_code=CLASS_INFINIBAND if nic["link_layer"] == "InfiniBand" else CLASS_ETHERNET,
            subsystem_vendor=MELLANOX_VENDOR, subsystem_device=CONNECTX_SUBSYSTEM, numa_node=nic["numa_node"],
            port_type=ENDPOINT, bars=(Bar(0, 32 * MIB, RESOURCE_MEM64_PREFETCH),),
            upstream_switch=nic.get("pcie_switch")))
    for disk in hardware["nvme"]:
        endpoints.append(PciFunction(
            bus_id=disk["pci_bus_id"], kind="nvme", vendor=SAMSUNG_VENDOR, device=int(disk["pci_device_id"], 16),
            class_code=CLASS_NVME, subsystem_vendor=SAMSUNG_VENDOR, subsystem_device=NVME_SUBSYSTEM,
            port_type=ENDPOINT, link_generation=NVME_LINK[0], link_width=NVME_LINK[1],
            bars=(Bar(0, 32 * 1024, RESOURCE_MEM64),)))
    return endpoints


def _gpu_function(model: dict, gpu: dict) -> PciFunction:
    vram = _power_of_two_at_least(model["memory_total_mib"] * MIB)
    if model["vendor"] == "nvidia":
        class_code, revision = CLASS_3D_CONTROLLER, 0xA1
        bars = (Bar(0, 16 * MIB, RESOURCE_MEM32), Bar(1, vram, RESOURCE_MEM64_PREFETCH),
                Bar(3, 32 * MIB, RESOURCE_MEM64_PREFETCH))
    else:
        class_code, revision = CLASS_PROCESSING_ACCELERATOR, 0x00
        bars = (Bar(0, vram, RESOURCE_MEM64_PREFETCH), Bar(2, 2 * MIB, RESOURCE_MEM64_PREFETCH),
                Bar(5, 512 * 1024, RESOURCE_MEM32))
    vendor = int(model["pci_vendor_id"], 16)
    return PciFunction(
        bus_id=gpu["pci_bus_id"], kind="gpu", vendor=vendor, device=int(model["pci_device_id"], 16),
        class_code=class_code, subsystem_vendor=vendor, subsystem_device=int(model["pci_subsystem_id"], 16),
        revision=revision, numa_node=gpu["numa_node"], port_type=ENDPOINT,
        link_generation=model["pcie_generation"], link_width=model["pcie_width"], bars=bars,
        upstream_switch=gpu.get("pcie_switch"), unreachable=bool(gpu.get("fallen_off_bus")))


def _attach_to_switches(endpoints: list[PciFunction], hardware: dict) -> list[PciFunction]:
    """Put each GPU and NIC behind the PCIe switch the hardware document names; return what hangs off root ports."""
    switch_buses = sorted(_split_bus_id(s["pci_bus_id"]) for s in hardware["pcie_switches"])
    switches: dict[tuple[int, int], list[PciFunction]] = {key: [] for key in switch_buses}
    direct = []
    for fn in endpoints:
        if fn.upstream_switch:
            switches[_split_bus_id(fn.upstream_switch)].append(fn)
        else:
            direct.append(fn)
    upstream_ports = [_switch(domain, bus, members) for (domain, bus), members in switches.items() if members]
    return sorted(direct + upstream_ports, key=lambda fn: fn.bus_id)


def _switch(domain: int, bus: int, members: list[PciFunction]) -> PciFunction:
    """An upstream port with one downstream port per device behind it, on the next bus number."""
    generation = max(member.link_generation for member in members)
    downstream = [
        _switch_port(f"{domain:04x}:{bus + 1:02x}:{slot:02x}.0", DOWNSTREAM_PORT, generation, [member])
        for slot, member in enumerate(sorted(members, key=lambda fn: fn.bus_id))
    ]
    return _switch_port(f"{domain:04x}:{bus:02x}:00.0", UPSTREAM_PORT, generation, downstream)


def _switch_port(bus_id: str, port_type: int, generation: int, children: list[PciFunction]) -> PciFunction:
    vendor, device = BROADCOM_PEX890XX
    return PciFunction(
        bus_id=bus_id, kind="bridge", vendor=vendor, device=device, class_code=CLASS_PCI_BRIDGE,
        subsystem_vendor=vendor, subsystem_device=PEX89144_SUBSYSTEM, revision=0xB0,
        numa_node=children[0].numa_node, port_type=port_type, link_generation=generation,
        secondary_bus=min(child.bus for child in children),
        subordinate_bus=max(node.bus for child in children for node in child.subtree()), children=children)


def _root_ports(attachments: list[PciFunction], complex_: RootComplex, acs_enabled: bool) -> list[PciFunction]:
    first_device = 0 if complex_.host_bridge is None else 1
    ports = []
    for domain in sorted({fn.domain for fn in attachments}):
        below = [fn for fn in attachments if fn.domain == domain]
        for slot, child in enumerate(below, start=first_device):
            ports.append(PciFunction(
                bus_id=f"{domain:04x}:00:{slot:02x}.0", kind="bridge", vendor=complex_.vendor,
                device=complex_.root_port, class_code=CLASS_PCI_BRIDGE, subsystem_vendor=complex_.vendor,
                revision=0x04, numa_node=child.numa_node, port_type=ROOT_PORT,
                link_generation=max(PLATFORM_PCIE_GENERATION, child.link_generation),
                secondary_bus=child.bus, subordinate_bus=max(node.bus for node in child.subtree()),
                children=[child]))
    for port in ports:
        for node in port.subtree():
            if node.port_type in (ROOT_PORT, DOWNSTREAM_PORT):
                node.acs_enabled = acs_enabled
    return ports


def _train_links(roots: list[PciFunction]) -> None:
    """Each port and the device below it settle on the best speed and width both support."""
    for root in roots:
        for port in root.subtree():
            if port.port_type in (ROOT_PORT, DOWNSTREAM_PORT):
                child = port.children[0]
                port.trained = child.trained = (min(port.link_generation, child.link_generation),
                                                min(port.link_width, child.link_width))


def _root_complex(cpu_model: str) -> RootComplex:
    for maker, complex_ in ROOT_COMPLEXES.items():
        if maker in cpu_model:
            return complex_
    raise ValueError(f"no root complex known for CPU {cpu_model!r}")


def _assign_addresses(roots: list[PciFunction]) -> None:
    """Give every BAR a naturally aligned address in bus order and size the bridge windows to fit."""
    next_free = {False: MMIO32_START, True: MMIO64_START}  # keyed by "prefetchable"
    for root in roots:
        for fn in root.subtree():
            for bar in fn.bars:
                address = _align(next_free[bar.prefetchable], bar.size)
                fn.addresses[bar.index] = address
                next_free[bar.prefetchable] = address + bar.size
    for root in roots:
        for bridge in (node for node in root.subtree() if node.is_bridge):
            _size_windows(bridge)


def _size_windows(bridge: PciFunction) -> None:
    ranges: dict[str, list[tuple[int, int]]] = {"mem": [], "prefetch": []}
    for node in bridge.subtree():
        for bar in node.bars:
            start = node.addresses[bar.index]
            ranges["prefetch" if bar.prefetchable else "mem"].append((start, start + bar.size - 1))
    for name, spans in ranges.items():
        if spans:
            base = min(start for start, _ in spans) & ~(BRIDGE_WINDOW_ALIGN - 1)
            limit = _align(max(end for _, end in spans) + 1, BRIDGE_WINDOW_ALIGN) - 1
            bridge.windows[name] = (base, limit)


def config_space(fn: PciFunction) -> bytes:
    """The function's configuration space as the `config` file returns it."""
    size = CONFIG_SIZE_CONVENTIONAL if fn.port_type is None else CONFIG_SIZE_EXPRESS
    if fn.unreachable:
        return b"\xff" * size
    config = bytearray(size)
    struct.pack_into("<HHHH", config, 0x00, fn.vendor, fn.device, COMMAND_MEMORY_BUSMASTER,
                     STATUS_CAP_LIST if fn.port_type is not None else 0)
    struct.pack_into("<I", config, 0x08, fn.class_code << 8 | fn.revision)
    if fn.is_bridge:
        config[0x0E] = HEADER_TYPE_BRIDGE
        _bridge_header(config, fn)
    else:
        _endpoint_header(config, fn)
    if fn.port_type is not None:
        config[0x34] = PM_OFFSET
        _power_management(config, next_cap=EXPRESS_OFFSET)
        _express_capability(config, fn)
        if fn.port_type in (ROOT_PORT, DOWNSTREAM_PORT):
            _acs_capability(config, fn)
    return bytes(config)


def _endpoint_header(config: bytearray, fn: PciFunction) -> None:
    for bar in fn.bars:
        address = fn.addresses[bar.index]
        offset = 0x10 + 4 * bar.index
        low_bits = bar.flags & 0xF
        if bar.is_64bit:
            struct.pack_into("<Q", config, offset, address | low_bits)
        else:
            struct.pack_into("<I", config, offset, address | low_bits)
    struct.pack_into("<HH", config, 0x2C, fn.subsystem_vendor, fn.subsystem_device)
    config[0x3C], config[0x3D] = _irq(fn), INTERRUPT_PIN_A


def _bridge_header(config: bytearray, fn: PciFunction) -> None:
    config[0x18], config[0x19], config[0x1A] = fn.bus, fn.secondary_bus, fn.subordinate_bus
    mem_base, mem_limit = fn.windows.get("mem", DISABLED_WINDOW)
    struct.pack_into("<HH", config, 0x20, (mem_base >> 16) & 0xFFF0, (mem_limit >> 16) & 0xFFF0)
    pref_base, pref_limit = fn.windows.get("prefetch", DISABLED_WINDOW)
    struct.pack_into("<HHII", config, 0x24, (pref_base >> 16) & 0xFFF0 | PREFETCH_WINDOW_64BIT,
                     (pref_limit >> 16) & 0xFFF0 | PREFETCH_WINDOW_64BIT, pref_base >> 32, pref_limit >> 32)
    config[0x3C], config[0x3D] = _irq(fn), INTERRUPT_PIN_A


def _power_management(config: bytearray, next_cap: int) -> None:
    config[PM_OFFSET], config[PM_OFFSET + 1] = CAP_POWER_MANAGEMENT, next_cap
    struct.pack_into("<HH", config, PM_OFFSET + 2, PM_CAPABILITIES, PM_CONTROL)


def _express_capability(config: bytearray, fn: PciFunction) -> None:
    base = EXPRESS_OFFSET
    is_port = fn.port_type in (ROOT_PORT, DOWNSTREAM_PORT)
    config[base], config[base + 1] = CAP_EXPRESS, 0
    struct.pack_into("<H", config, base + 0x02,
                     EXPRESS_VERSION | fn.port_type << 4 | (EXPRESS_SLOT_IMPLEMENTED if is_port else 0))
    device_caps = DEVICE_CAPABILITIES | (DEVICE_CAPABILITY_FLR if fn.port_type == ENDPOINT else 0)
    struct.pack_into("<IHH", config, base + 0x04, device_caps, DEVICE_CONTROL, 0)
    speed, width = fn.link_generation, fn.link_width
    status_speed, status_width = fn.link_status
    link_caps = speed | width << 4 | (LINK_CAPABILITIES_PORT if is_port else 0) | _port_number(fn) << 24
    link_status = (status_speed | status_width << 4 | LINK_STATUS_SLOT_CLOCK
                   | (LINK_STATUS_DL_ACTIVE if is_port else 0))
    struct.pack_into("<IHH", config, base + 0x0C, link_caps, LINK_CONTROL, link_status)
    supported_speeds = sum(1 << generation for generation in range(1, speed + 1))
    struct.pack_into("<IHH", config, base + 0x2C, supported_speeds, speed, 0)


def _acs_capability(config: bytearray, fn: PciFunction) -> None:
    capabilities = ACS_CAP_ROOT_PORT if fn.port_type == ROOT_PORT else ACS_CAP_DOWNSTREAM_PORT
    control = ACS_CTL_ENABLED if fn.acs_enabled else ACS_CTL_DISABLED
    struct.pack_into("<IHH", config, EXT_CAP_OFFSET, EXT_CAP_ACS | 1 << 16, capabilities, control)


def _attribute_files(fn: PciFunction) -> dict[str, str]:
    files = {
        "vendor": f"0x{fn.vendor:04x}\n",
        "device": f"0x{fn.device:04x}\n",
        "class": f"0x{fn.class_code:06x}\n",
        "subsystem_vendor": f"0x{fn.subsystem_vendor:04x}\n",
        "subsystem_device": f"0x{fn.subsystem_device:04x}\n",
        "revision": f"0x{fn.revision:02x}\n",
        "irq": f"{_irq(fn)}\n",
        "numa_node": f"{fn.numa_node}\n",
        "enable": "1\n",
        "resource": _resource_file(fn),
        "modalias": MODALIAS.format(
            vendor=fn.vendor, device=fn.device, sv=fn.subsystem_vendor, sd=fn.subsystem_device,
            cls=fn.class_code >> 16, sub=fn.class_code >> 8 & 0xFF, prog=fn.class_code & 0xFF),
    }
    if fn.port_type is not None:
        status_speed, status_width = fn.link_status
        files |= {"max_link_speed": LINK_SPEED.format(GT_PER_S[fn.link_generation]),
                  "current_link_speed": LINK_SPEED.format(GT_PER_S[status_speed]),
                  "max_link_width": f"{fn.link_width}\n", "current_link_width": f"{status_width}\n"}
    return files


def _resource_file(fn: PciFunction) -> str:
    lines = [(0, 0, 0)] * (ENDPOINT_RESOURCE_LINES + (4 if fn.is_bridge else 0))
    for bar in fn.bars:
        start = fn.addresses[bar.index]
        lines[bar.index] = (start, start + bar.size - 1, bar.flags)
    for offset, (name, flags) in enumerate((("mem", RESOURCE_WINDOW_MEM), ("prefetch", RESOURCE_WINDOW_PREFETCH))):
        if name in fn.windows:
            lines[BRIDGE_WINDOW_LINE + 1 + offset] = (*fn.windows[name], flags)
    return "".join(RESOURCE_LINE.format(*line) for line in lines)


def _irq(fn: PciFunction) -> int:
    return IRQ_BASE + fn.bus % 16


def _port_number(fn: PciFunction) -> int:
    return int(fn.bus_id.split(":")[2].split(".")[0], 16)


def _clear_driver_links(drivers_dir: Path) -> None:
    """Forget earlier bindings: the `driver` links point into drivers/, so drop both sides."""
    if not drivers_dir.is_dir():
        return
    for driver in drivers_dir.iterdir():
        for link in driver.iterdir():
            (link / "driver").unlink(missing_ok=True)
            link.unlink()
        driver.rmdir()


def _split_bus_id(bus_id: str) -> tuple[int, int]:
    domain, bus = bus_id.split(":")[:2]
    return int(domain, 16), int(bus, 16)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _power_of_two_at_least(value: int) -> int:
    return 1 << (value - 1).bit_length()


# --- SMBIOS -------------------------------------------------------------------------------------

SMBIOS_VERSION = (3, 3)
SMBIOS3_ANCHOR = b"_SM3_"
# anchor, checksum, length, major, minor, docrev, entry point revision, reserved, table max size, table address
SMBIOS3_ENTRY_POINT = "<5sBBBBBBBIQ"
SMBIOS3_ENTRY_POINT_LENGTH = 0x18
# Where firmware typically leaves the table; the sysfs DMI file starts at it, so only its value shows.
SMBIOS_TABLE_ADDRESS = 0x6F7E_5000
TYPE_BIOS, TYPE_SYSTEM, TYPE_END = 0, 1, 127
BIOS_STRUCTURE = "<BBHBBHBBQBBBBBBH"
SYSTEM_STRUCTURE = "<BBHBBBB16sBBB"
END_STRUCTURE = "<BBH"
BIOS_START_SEGMENT = 0xF000
BIOS_ROM_SIZE_EXTENDED = 0xFF
BIOS_ROM_SIZE_32MB = 32  # extended ROM size; bits 15:14 = 0 select MB units
# PCI, upgradeable, shadowing, CD boot, selectable boot, EDD, then ACPI, USB legacy, BBS, UEFI
BIOS_CHARACTERISTICS = 1 << 7 | 1 << 11 | 1 << 12 | 1 << 15 | 1 << 16 | 1 << 19
BIOS_CHARACTERISTICS_EXT = (0x03, 0x0D)
NO_EMBEDDED_CONTROLLER = 0xFF
WAKE_UP_POWER_SWITCH = 6


def render_smbios(hardware: dict, table_address: int = SMBIOS_TABLE_ADDRESS) -> tuple[bytes, bytes]:
    """The SMBIOS 3 entry point and structure table, as /sys/firmware/dmi/tables/ serves them.

    `table_address` is where the entry point says the table lies; a `dmidecode --dump-bin` file
    has the table right after the 32-byte entry point, at address 32.
    """
    system = hardware["system"]
    major, minor = _bios_release(system["bios_version"])
    bios = _structure(
        struct.pack(BIOS_STRUCTURE, TYPE_BIOS, struct.calcsize(BIOS_STRUCTURE), 0x0000, 1, 2, BIOS_START_SEGMENT,
                    3, BIOS_ROM_SIZE_EXTENDED, BIOS_CHARACTERISTICS, *BIOS_CHARACTERISTICS_EXT, major, minor,
                    NO_EMBEDDED_CONTROLLER, NO_EMBEDDED_CONTROLLER, BIOS_ROM_SIZE_32MB),
        system["bios_vendor"], system["bios_version"], system["bios_release_date"])
    product = _structure(
        struct.pack(SYSTEM_STRUCTURE, TYPE_SYSTEM, struct.calcsize(SYSTEM_STRUCTURE), 0x0001, 1, 2, 0, 3,
                    uuid.UUID(system["uuid"]).bytes_le, WAKE_UP_POWER_SWITCH, 0, 0),
        system["manufacturer"], system["product_name"], system["serial_number"])
    end = _structure(struct.pack(END_STRUCTURE, TYPE_END, struct.calcsize(END_STRUCTURE), 0x0002))
    table = bios + product + end
    entry = bytearray(struct.pack(SMBIOS3_ENTRY_POINT, SMBIOS3_ANCHOR, 0, SMBIOS3_ENTRY_POINT_LENGTH,
                                  *SMBIOS_VERSION, 0, 1, 0, len(table), table_address))
    entry[5] = -sum(entry) & 0xFF
    return bytes(entry), table


def _structure(formatted: bytes, *strings: str) -> bytes:
    """A formatted area followed by its string set (each NUL-terminated, the set ends in a NUL)."""
    if not strings:
        return formatted + b"\0\0"
    return formatted + b"".join(s.encode() + b"\0" for s in strings) + b"\0"


def _bios_release(version: str) -> tuple[int, int]:
    """The System BIOS major/minor release bytes from a version such as "2.1" or "02.04.06"."""
    parts = [int(part) for part in version.split(".")[:2] if part.isdigit()]
    return (parts + [0, 0])[:2] if parts else (0xFF, 0xFF)


# --- layout -------------------------------------------------------------------------------------

PCI_DEVICES = "bus/pci/devices"
DMI_TABLES = "firmware/dmi/tables"


def write_sysfs(hardware: dict, sys_root: Path, drivers: dict[str, str] | None = None) -> None:
    """Lay out the PCI devices and the SMBIOS tables under a /sys root."""
    render_pci_devices(hardware, sys_root / PCI_DEVICES, drivers)
    entry_point, table = render_smbios(hardware)
    tables = sys_root / DMI_TABLES
    tables.mkdir(parents=True, exist_ok=True)
    (tables / "smbios_entry_point").write_bytes(entry_point)
    (tables / "DMI").write_bytes(table)
