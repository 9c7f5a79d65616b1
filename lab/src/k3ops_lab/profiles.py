"""Hardware profiles of the simulated lab hosts: what each host's firmware and buses show.

A profile renders to the `hardware.json` document that the lab writes into each host
(`/etc/k3ops-lab/hardware.json`). Everything simulated on the host (the sysfs layer that real
`lspci` and `dmidecode` read, and the vendor tools of the simulated driver packages) reads that one
document, so a fault injected by editing it shows everywhere at once.

Each profile is one of k3ops.hardware's boards, which says its GPU model, GPU count and NVSwitches;
a profile adds only what the simulator shows beyond that (bus placement, firmware, PCI ids, NICs).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import asdict, dataclass, field, replace

from k3ops.hardware import BOARD_PROFILES, GPU_MODELS, BoardProfile, GpuModel

NVIDIA_VENDOR_ID = "0x10de"
AMD_VENDOR_ID = "0x1002"
MELLANOX_VENDOR_ID = "0x15b3"
BROADCOM_PLX_VENDOR_ID = "0x1000"
SAMSUNG_VENDOR_ID = "0x144d"


@dataclass(frozen=True)
class SimulatedGpu:
    """One GPU model of k3ops.hardware as its PCI IDs and its tools describe it."""

    model: GpuModel
    pci_vendor_id: str
    pci_device_id: str
    pci_subsystem_id: str
    memory_total_mib: int
    power_limit_w: int
    compute_capability: str  # CUDA's ("9.0", "10.3"); on AMD the gfx target, ROCm's equivalent ("gfx950")
    vbios_version: str
    board_part_number: str
    pcie_generation: int
    pcie_width: int
    nvlink_count: int = 0  # NVLink (NVIDIA) or XGMI (AMD) links per GPU
    nvlink_speed_gbps: float = 0.0

    def document(self) -> dict:
        """The model's entry in hardware.json: its name, vendor and architecture beside what the tools show."""
        entry = asdict(self)
        return entry.pop("model") | entry


@dataclass(frozen=True)
class Nic:
    """A network adapter as ibstat / ibv_devinfo and lspci show it."""

    name: str  # mlx5_0
    netdev: str  # ibp24s0 / ens1np0
    pci_bus_id: str
    pci_device_id: str
    ca_type: str  # MT4129
    board_id: str
    fw_version: str
    link_layer: str  # "InfiniBand" or "Ethernet"
    rate_gbps: int
    numa_node: int


@dataclass(frozen=True)
class Nvme:
    """An NVMe namespace: the lab backs it with a sparse file on a loop device."""

    name: str  # nvme0n1
    model: str
    pci_bus_id: str
    pci_device_id: str
    size_gib: int


@dataclass(frozen=True)
class Profile:
    """A whole host: system board, GPUs with their bus placement, switches, NICs and disks."""

    name: str  # its board in k3ops.hardware.BOARD_PROFILES
    description: str
    manufacturer: str
    product_name: str
    bios_vendor: str
    bios_version: str
    bios_release_date: str
    cpu_model: str
    cpu_cores_per_socket: int
    cpu_threads_per_core: int
    gpu_bus_ids: tuple[str, ...] = ()
    gpu_numa_nodes: tuple[int, ...] = ()
    nvswitch_bus_ids: tuple[str, ...] = ()
    nvswitch_device_id: str = ""
    pcie_switch_bus_ids: tuple[str, ...] = ()
    gpu_links: str = "none"  # on a board without NVSwitches: "nvlink-domain" (GB300 NVL72 trays), "xgmi", "none"
    nics: tuple[Nic, ...] = ()
    nvme: tuple[Nvme, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        """The bus ids place exactly the board's GPUs."""
        if len(self.gpu_bus_ids) != self.board.gpu_count:
            raise ValueError(f"profile {self.name}: {len(self.gpu_bus_ids)} GPU bus ids for a board of "
                             f"{self.board.gpu_count} GPUs")

    @property
    def board(self) -> BoardProfile:
        return BOARD_PROFILES[self.name]

    @property
    def gpu(self) -> SimulatedGpu | None:
        return SIMULATED_GPUS[self.board.gpu_model] if self.board.gpu_model else None

    @property
    def fabric(self) -> str:
        """What joins the GPUs: "nvswitch" on an HGX baseboard, else the GPUs' own links."""
        return "nvswitch" if self.board.nvswitch else self.gpu_links

    def pcie_switch_above(self, bus_id: str) -> str | None:
        """The PCIe switch a GPU or NIC sits behind: the nearest one numbered below it in its domain."""
        domain, bus = bus_id.split(":")[:2]
        above = [switch for switch in self.pcie_switch_bus_ids
                 if switch.split(":")[0] == domain and int(switch.split(":")[1], 16) < int(bus, 16)]
        return max(above, key=lambda switch: int(switch.split(":")[1], 16), default=None)

    def disks(self, count: int | None = None) -> tuple[Nvme, ...]:
        """The board's NVMe devices, or `count` of its first model, numbered and placed one bus apart."""
        if count is None:
            return self.nvme
        first = self.nvme[0]
        domain, bus = first.pci_bus_id.split(":")[:2]
        return tuple(replace(first, name=f"nvme{index}n1", pci_bus_id=f"{domain}:{int(bus, 16) + index:02x}:00.0")
                     for index in range(count))

    def hardware(self, hostname: str, nvme_size_gib: int | None = None, nvme_devices: int | None = None) -> dict:
        """The `hardware.json` document for one host; identifiers are stable per host name."""
        gpus = [
            {
                "index": index,
                "pci_bus_id": bus_id,
                "numa_node": self.gpu_numa_nodes[index],
                "uuid": _stable_gpu_uuid(hostname, index, self.gpu.model.vendor),
                "serial": _stable_digits(f"{hostname}/gpu/{index}", 13),
                "module_id": index + 1,
                "minor_number": index,
                "pcie_switch": self.pcie_switch_above(bus_id),
            }
            for index, bus_id in enumerate(self.gpu_bus_ids)
        ]
        nvme = []
        for disk in self.disks(nvme_devices):
            entry = asdict(disk)
            if nvme_size_gib is not None:
                entry["size_gib"] = nvme_size_gib
            entry["serial"] = "S" + _stable_digits(f"{hostname}/{disk.name}", 13)
            nvme.append(entry)
        return {
            "profile": self.name,
            "hostname": hostname,
            "system": {
                "manufacturer": self.manufacturer,
                "product_name": self.product_name,
                "serial_number": _stable_digits(f"{hostname}/system", 10),
                "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{hostname}.k3ops-lab")),
                "bios_vendor": self.bios_vendor,
                "bios_version": self.bios_version,
                "bios_release_date": self.bios_release_date,
            },
            "cpu_model": self.cpu_model,
            "cpu_cores_per_socket": self.cpu_cores_per_socket,
            "cpu_threads_per_core": self.cpu_threads_per_core,
            "gpu_model": self.gpu.document() if self.gpu else None,
            "gpus": gpus,
            "nvswitches": [
                {"pci_bus_id": bus_id, "pci_device_id": self.nvswitch_device_id}
                for bus_id in self.nvswitch_bus_ids
            ],
            "pcie_switches": [{"pci_bus_id": bus_id} for bus_id in self.pcie_switch_bus_ids],
            "fabric": self.fabric,
            "cluster_uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, "nvl-domain.k3ops-lab"))
            if self.fabric == "nvlink-domain"
            else None,
            "nics": [
                asdict(nic) | {"node_guid": _stable_guid(f"{hostname}/{nic.name}"),
                               "pcie_switch": self.pcie_switch_above(nic.pci_bus_id)}
                for nic in self.nics
            ],
            "nvme": nvme,
            "secure_boot": False,
            # BIOS setting: HGX/UBB hosts ship with PCIe ACS off so GPUs and NICs do P2P through their switch
            "pcie_acs_enabled": False,
            "faults": {},
        }


def _stable_digits(seed: str, length: int) -> str:
    return str(int(hashlib.sha256(seed.encode()).hexdigest(), 16))[:length]


MELLANOX_OUI = "a088c2"


def _stable_guid(seed: str) -> str:
    """A node GUID as ConnectX adapters carry them: the Mellanox OUI, 0300, then a per-device part."""
    return f"0x{MELLANOX_OUI}0300{hashlib.sha256(seed.encode()).hexdigest()[:6]}"


def _stable_gpu_uuid(hostname: str, index: int, vendor: str | None) -> str:
    value = uuid.uuid5(uuid.NAMESPACE_DNS, f"{hostname}/gpu/{index}.k3ops-lab")
    return f"GPU-{value}" if vendor == "nvidia" else str(value)


def _cx7_nics(bus_ids: tuple[str, ...], numa_split: int) -> tuple[Nic, ...]:
    """ConnectX-7 NDR 400G InfiniBand HCAs, one per GPU as on HGX systems."""
    return tuple(
        Nic(
            name=f"mlx5_{index}",
            netdev=f"ibp{int(bus_id.split(':')[1], 16)}s0",
            pci_bus_id=bus_id,
            pci_device_id="0x1021",
            ca_type="MT4129",
            board_id="MT_0000000838",
            fw_version="28.41.1000",
            link_layer="InfiniBand",
            rate_gbps=400,
            numa_node=0 if index < numa_split else 1,
        )
        for index, bus_id in enumerate(bus_ids)
    )


_HGX_GPU_BUSES = (
    "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
    "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0",
)
_HGX_NIC_BUSES = (
    "0000:19:00.0", "0000:2b:00.0", "0000:3b:00.0", "0000:5e:00.0",
    "0000:9b:00.0", "0000:ac:00.0", "0000:bb:00.0", "0000:dc:00.0",
)
_HGX_PCIE_SWITCHES = ("0000:15:00.0", "0000:27:00.0", "0000:37:00.0", "0000:5a:00.0",
                      "0000:97:00.0", "0000:a8:00.0", "0000:b7:00.0", "0000:d8:00.0")
_SAMSUNG_PM9A3 = Nvme(name="nvme0n1", model="SAMSUNG MZQL23T8HCLS-00A07",
                      pci_bus_id="0000:c1:00.0", pci_device_id="0xa80a", size_gib=4)
_EIGHT_GPU_NUMA = (0, 0, 0, 0, 1, 1, 1, 1)

# The GPU models the lab's profiles carry, by k3ops.hardware's name for them.
SIMULATED_GPUS: dict[str, SimulatedGpu] = {
    gpu.model.name: gpu
    for gpu in (
        SimulatedGpu(
            GPU_MODELS["NVIDIA H200"], pci_vendor_id=NVIDIA_VENDOR_ID, pci_device_id="0x2335",
            pci_subsystem_id="0x18be", memory_total_mib=143771, power_limit_w=700,
            compute_capability="9.0", vbios_version="96.00.A5.00.03", board_part_number="692-2G520-0280-001",
            pcie_generation=5, pcie_width=16, nvlink_count=18, nvlink_speed_gbps=26.562,
        ),
        SimulatedGpu(
            GPU_MODELS["NVIDIA B300 SXM6 AC"], pci_vendor_id=NVIDIA_VENDOR_ID, pci_device_id="0x3182",
            pci_subsystem_id="0x20e6", memory_total_mib=275040, power_limit_w=1100,
            compute_capability="10.3", vbios_version="97.10.2A.00.06", board_part_number="692-2G525-0230-000",
            pcie_generation=6, pcie_width=16, nvlink_count=18, nvlink_speed_gbps=53.125,
        ),
        SimulatedGpu(
            GPU_MODELS["NVIDIA GB300"], pci_vendor_id=NVIDIA_VENDOR_ID, pci_device_id="0x31c2",
            pci_subsystem_id="0x21ec", memory_total_mib=284208, power_limit_w=1400,
            compute_capability="10.3", vbios_version="97.10.4A.00.0B", board_part_number="699-2G576-0200-000",
            pcie_generation=6, pcie_width=16, nvlink_count=18, nvlink_speed_gbps=53.125,
        ),
        SimulatedGpu(
            GPU_MODELS["AMD Instinct MI355X"], pci_vendor_id=AMD_VENDOR_ID, pci_device_id="0x75a3",
            pci_subsystem_id="0x75a3", memory_total_mib=294896, power_limit_w=1400,
            compute_capability="gfx950", vbios_version="113-M3550101-100", board_part_number="102-M3550-00",
            pcie_generation=5, pcie_width=16, nvlink_count=7, nvlink_speed_gbps=38.4,
        ),
    )
}

H200X8 = Profile(
    name="h200x8",
    description="HGX H200 8-GPU baseboard with four third-generation NVSwitches",
    manufacturer="Supermicro",
    product_name="SYS-821GE-TNHR",
    bios_vendor="American Megatrends International, LLC.",
    bios_version="2.1",
    bios_release_date="03/12/2024",
    cpu_model="Intel(R) Xeon(R) Platinum 8480+",
    cpu_cores_per_socket=56,
    cpu_threads_per_core=2,
    gpu_bus_ids=_HGX_GPU_BUSES,
    gpu_numa_nodes=_EIGHT_GPU_NUMA,
    nvswitch_bus_ids=("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"),
    nvswitch_device_id="0x22a3",
    pcie_switch_bus_ids=_HGX_PCIE_SWITCHES,
    nics=_cx7_nics(_HGX_NIC_BUSES, 4),
    nvme=(_SAMSUNG_PM9A3,),
)

B300X8 = Profile(
    name="b300x8",
    description="HGX B300 8-GPU baseboard (NVLink 5 switch trays managed by NVLSM)",
    manufacturer="Supermicro",
    product_name="SYS-A22GA-NBRT",
    bios_vendor="American Megatrends International, LLC.",
    bios_version="1.3",
    bios_release_date="07/21/2025",
    cpu_model="Intel(R) Xeon(R) 6776P",
    cpu_cores_per_socket=64,
    cpu_threads_per_core=2,
    gpu_bus_ids=_HGX_GPU_BUSES,
    gpu_numa_nodes=_EIGHT_GPU_NUMA,
    pcie_switch_bus_ids=_HGX_PCIE_SWITCHES,
    nics=_cx7_nics(_HGX_NIC_BUSES, 4),
    nvme=(_SAMSUNG_PM9A3,),
)

GB300X4 = Profile(
    name="gb300x4",
    description="One compute tray of a GB300 system: two Grace CPUs, four GB300 GPUs in an NVLink domain",
    manufacturer="NVIDIA",
    product_name="GB300 NVL72",
    bios_vendor="NVIDIA",
    bios_version="02.04.06",
    bios_release_date="08/14/2025",
    cpu_model="NVIDIA Grace",
    cpu_cores_per_socket=72,
    cpu_threads_per_core=1,
    gpu_bus_ids=("0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"),
    gpu_numa_nodes=(0, 0, 1, 1),
    gpu_links="nvlink-domain",
    nics=_cx7_nics(("0000:03:00.0", "0002:03:00.0", "0010:03:00.0", "0012:03:00.0"), 2),
    nvme=(_SAMSUNG_PM9A3,),
)

MI355X8 = Profile(
    name="mi355x8",
    description="8x AMD Instinct MI355X OAM on a UBB 2.0 board, XGMI-connected",
    manufacturer="Supermicro",
    product_name="AS -4126GS-NMR-LCC",
    bios_vendor="American Megatrends International, LLC.",
    bios_version="1.2",
    bios_release_date="06/05/2025",
    cpu_model="AMD EPYC 9575F 64-Core Processor",
    cpu_cores_per_socket=64,
    cpu_threads_per_core=2,
    gpu_bus_ids=("0000:05:00.0", "0000:15:00.0", "0000:65:00.0", "0000:75:00.0",
                 "0000:85:00.0", "0000:95:00.0", "0000:e5:00.0", "0000:f5:00.0"),
    gpu_numa_nodes=_EIGHT_GPU_NUMA,
    pcie_switch_bus_ids=("0000:02:00.0", "0000:12:00.0", "0000:62:00.0", "0000:72:00.0",
                         "0000:82:00.0", "0000:92:00.0", "0000:e2:00.0", "0000:f2:00.0"),
    gpu_links="xgmi",
    nics=_cx7_nics(("0000:06:00.0", "0000:16:00.0", "0000:66:00.0", "0000:76:00.0",
                    "0000:86:00.0", "0000:96:00.0", "0000:e6:00.0", "0000:f6:00.0"), 4),
    nvme=(_SAMSUNG_PM9A3,),
)

CPU = Profile(
    name="cpu",
    description="A CPU-only server (llama.cpp, control plane)",
    manufacturer="Dell Inc.",
    product_name="PowerEdge R760",
    bios_vendor="Dell Inc.",
    bios_version="2.3.5",
    bios_release_date="09/10/2024",
    cpu_model="Intel(R) Xeon(R) Gold 6430",
    cpu_cores_per_socket=32,
    cpu_threads_per_core=2,
    nvme=(_SAMSUNG_PM9A3,),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (H200X8, B300X8, GB300X4, MI355X8, CPU)}
DEFAULT_PROFILE = "h200x8"


def get_profile(name: str) -> Profile:
    """Look a profile up by name, with an error that lists the ones there are."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown hardware profile {name!r}; known profiles: {', '.join(PROFILES)}") from None
