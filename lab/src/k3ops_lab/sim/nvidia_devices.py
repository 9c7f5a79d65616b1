"""The NVIDIA GPUs of a lab host as the driver reports them, shared by every simulated NVIDIA tool.

nvidia-smi, dcgmi, nvidia-ctk and all_reduce_perf all read the same driver state, the same GPU
identities and the same idle readings from here, so that they agree with each other the way the
real tools agree on a real host. Readings are plausible idle values that depend only on the GPU
index: no randomness, so tests and validation suites see stable output.

Faults live in hardware.json under "faults", GPUs by their hardware index (each tool shows the ones it
would on real hardware):
  "remapped_rows_pending": [3]          GPU 3 has a row remap pending (a GPU reset or a reboot activates it)
  "remapped_rows": {"3": 1}             rows remapped on GPU 3 earlier, recorded in its InfoROM (kept for good)
  "row_remap_failure": [3]              a row remap failed on GPU 3 (kept for good: an RMA criterion)
  "nvlink_down_links": {"3": [0, 1]}    NVLinks 0 and 1 of GPU 3 are down (until the next boot)
  "power_brake": [3]                    the system asserts GPU 3's power brake (a PSU fault, the BMC's power
                                        capping): the board slows its clocks until the signal drops
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from .host import SimHost

# Grace exposes each GPU's memory as its own NUMA nodes (8 per GPU): the socket's node, then those.
GRACE_GPU_MEMORY_NUMA_NODES = 8

# Idle draw as a share of the power limit (HGX H100/H200 idle near 75-100 W of 700 W).
IDLE_POWER_SHARE = 0.11
# Driver-reserved framebuffer: 614 MiB of the H200's 143771 MiB.
RESERVED_FRAMEBUFFER_SHARE = 0.00427
IDLE_TEMPERATURE_C = 28
MEMORY_ABOVE_GPU_TEMPERATURE_C = 6
DRAM_CORRECTABLE_BEFORE_REMAP = 12  # the correctable errors that led the driver to mark a row for remapping


@dataclass(frozen=True)
class ArchitectureFacts:
    """What nvidia-smi reports that depends on the GPU generation rather than on the board."""

    max_graphics_mhz: int
    max_memory_mhz: int
    max_video_mhz: int
    idle_graphics_mhz: int
    idle_video_mhz: int
    remap_banks: int  # bank remap availability histogram: banks with full spare rows
    part_number_suffix: str


ARCHITECTURES = {
    "Hopper": ArchitectureFacts(1980, 3201, 1545, 345, 765, 3072, "895-A1"),
    "Blackwell": ArchitectureFacts(2032, 3996, 1950, 120, 600, 4096, "886-A1"),
}


def now() -> datetime:
    """The local time every simulated tool stamps its output with; tests replace it."""
    return datetime.now().astimezone()


def ctime() -> str:
    """now() as ctime(3) spells it, day padded with a space: "Fri Jul  3 22:11:09 2026"."""
    moment = now()
    return f"{moment:%a %b} {moment.day:>2} {moment:%H:%M:%S %Y}"


class DriverState(enum.Enum):
    READY = "ready"
    NO_KERNEL_MODULE = "no kernel module"  # or no NVML library to reach it
    VERSION_MISMATCH = "version mismatch"


def driver_state(host: SimHost) -> DriverState:
    """Whether NVML can initialise: a module is loaded, at the version of the installed library."""
    module, library = host.nvidia_module_version(), host.nvidia_userspace_version()
    if module is None or library is None:
        return DriverState.NO_KERNEL_MODULE
    return DriverState.READY if module == library else DriverState.VERSION_MISMATCH


def major_minor(version: str) -> str:
    """"580.105.08" -> "580.105", as NVML reports its own version."""
    return ".".join(version.split(".")[:2])


@dataclass(frozen=True)
class PciAddress:
    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str) -> PciAddress:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return cls(int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))

    @property
    def nvidia(self) -> str:
        """The driver's spelling: "00000000:18:00.0"."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"


@dataclass(frozen=True)
class NvidiaGpu:
    """One GPU as NVML sees it, with its idle readings and the faults injected into it."""

    index: int
    name: str
    uuid: str
    serial: str
    pci: PciAddress
    pcie_switch: str | None
    numa_node: int
    minor_number: int
    module_id: int
    model: dict
    row_remap_pending: bool
    down_links: frozenset[int]
    hardware_index: int  # the GPU's index in hardware.json, which faults use (NVML's index skips lost GPUs)
    remapped_rows: int = 0  # active remaps in the InfoROM, besides a pending one
    row_remap_failure: bool = False
    power_brake: bool = False

    @property
    def architecture(self) -> ArchitectureFacts:
        return ARCHITECTURES[self.model["architecture"]]

    @property
    def memory_total_mib(self) -> int:
        return self.model["memory_total_mib"]

    @property
    def memory_reserved_mib(self) -> int:
        return round(self.memory_total_mib * RESERVED_FRAMEBUFFER_SHARE)

    memory_used_mib = 0

    @property
    def memory_free_mib(self) -> int:
        return self.memory_total_mib - self.memory_reserved_mib - self.memory_used_mib

    @property
    def bar1_total_mib(self) -> int:
        return 1 << (self.memory_total_mib - 1).bit_length()

    @property
    def power_limit_w(self) -> float:
        return float(self.model["power_limit_w"])

    @property
    def power_min_limit_w(self) -> float:
        return round(self.power_limit_w * 2 / 7, 2)

    @property
    def power_draw_w(self) -> float:
        return round(self.power_limit_w * IDLE_POWER_SHARE + (self.index * 37 % 11) * 0.83, 2)

    @property
    def temperature_c(self) -> int:
        return IDLE_TEMPERATURE_C + self.index * 3 % 7

    @property
    def memory_temperature_c(self) -> int:
        return self.temperature_c + MEMORY_ABOVE_GPU_TEMPERATURE_C

    utilization_percent = 0
    pstate = "P0"

    @property
    def nvlink_speeds(self) -> list[float | None]:
        """Each NVLink's speed in GB/s, None for a link that is down."""
        return [None if link in self.down_links else self.model["nvlink_speed_gbps"]
                for link in range(self.model["nvlink_count"])]

    @property
    def active_nvlinks(self) -> int:
        return sum(speed is not None for speed in self.nvlink_speeds)

    @property
    def device_id(self) -> str:
        """"2335" for PCI device 0x2335, as DCGM lists it."""
        return self.model["pci_device_id"][2:].lower()

    @property
    def nvml_device_id(self) -> str:
        return f"0x{self.model['pci_device_id'][2:].upper()}10DE"

    @property
    def nvml_subsystem_id(self) -> str:
        return f"0x{self.model['pci_subsystem_id'][2:].upper()}10DE"

    @property
    def board_id(self) -> str:
        return f"0x{self.pci.domain:x}{self.pci.bus:02x}00" if self.pci.domain else f"0x{self.pci.bus:02x}00"

    @property
    def gpu_part_number(self) -> str:
        return f"{self.device_id.upper()}-{self.architecture.part_number_suffix}"

    @property
    def inforom_image(self) -> str:
        """"692-2G520-0280-001" -> "G520.0280.00.05"."""
        _, board, variant, _ = self.model["board_part_number"].split("-")
        return f"G{board[2:]}.{variant}.00.05"


def nvidia_gpus(host: SimHost) -> list[NvidiaGpu]:
    """The GPUs the driver can reach, in NVML index order (by PCI address, as the driver enumerates)."""
    hardware = host.hardware()
    model = hardware["gpu_model"]
    if not model or model["vendor"] != "nvidia":
        return []
    faults = hardware.get("faults", {})
    pending = set(faults.get("remapped_rows_pending", []))
    remapped = faults.get("remapped_rows", {})
    failed = set(faults.get("row_remap_failure", []))
    down_links = faults.get("nvlink_down_links", {})
    braked = set(faults.get("power_brake", []))
    return [
        NvidiaGpu(
            index=index, name=model["name"], uuid=gpu["uuid"], serial=gpu["serial"],
            pci=PciAddress.parse(gpu["pci_bus_id"]), pcie_switch=gpu.get("pcie_switch"), numa_node=gpu["numa_node"],
            minor_number=gpu["minor_number"], module_id=gpu["module_id"], model=model,
            row_remap_pending=gpu["index"] in pending,
            down_links=frozenset(down_links.get(str(gpu["index"]), ())),
            hardware_index=gpu["index"],
            remapped_rows=int(remapped.get(str(gpu["index"]), 0)),
            row_remap_failure=gpu["index"] in failed,
            power_brake=gpu["index"] in braked,
        )
        for index, gpu in enumerate(sorted(host.visible_gpus(), key=lambda gpu: gpu["pci_bus_id"]))
    ]


def activate_pending_remaps(hardware: dict, indexes: set[int] | None = None) -> bool:
    """What a GPU reset does to the row remapper: a pending remap becomes active. The InfoROM already
    counted the row when it was marked (NVIDIA's A100 memory error management guide: nvidia-smi's count
    is "the number of entries recorded in the InfoROM, not the ones remapped in hardware"), so the count
    nvidia-smi shows stays and only Pending goes to No. `indexes` are hardware indexes, None for every
    GPU; returns whether the document changed."""
    faults = hardware.setdefault("faults", {})
    pending = faults.get("remapped_rows_pending", [])
    activated = [index for index in pending if indexes is None or index in indexes]
    if not activated:
        return False
    remapped = faults.setdefault("remapped_rows", {})
    for index in activated:
        remapped[str(index)] = int(remapped.get(str(index), 0)) + 1
    faults["remapped_rows_pending"] = [index for index in pending if index not in activated]
    if not faults["remapped_rows_pending"]:
        del faults["remapped_rows_pending"]
    return True


def cpu_affinity(hardware: dict, numa_node: int) -> str:
    """The CPUs of one NUMA node in `cpulist` form: "0-55,112-167" with hyperthreads, "72-143" without."""
    cores, threads = hardware["cpu_cores_per_socket"], hardware["cpu_threads_per_core"]
    sockets = len({gpu["numa_node"] for gpu in hardware["gpus"]}) or 1
    first = numa_node * cores
    ranges = [f"{first + thread * cores * sockets}-{first + thread * cores * sockets + cores - 1}"
              for thread in range(threads)]
    return ",".join(ranges)


def numa_affinity(hardware: dict, numa_node: int) -> str:
    """The NUMA nodes close to a GPU: its socket's node, and on Grace the GPU-memory nodes too."""
    if hardware["cpu_model"] != "NVIDIA Grace":
        return str(numa_node)
    sockets = len({gpu["numa_node"] for gpu in hardware["gpus"]})
    gpus_per_socket = len(hardware["gpus"]) // sockets
    first = sockets + numa_node * gpus_per_socket * GRACE_GPU_MEMORY_NUMA_NODES
    return f"{numa_node},{first}-{first + gpus_per_socket * GRACE_GPU_MEMORY_NUMA_NODES - 1}"


def nccl_library_version(host: SimHost) -> str | None:
    """The NCCL runtime's version ("2.28.7") from libnccl.so.2's real file name, None if not installed."""
    library = host.path("usr/lib/x86_64-linux-gnu/libnccl.so.2")
    if not library.exists():
        return None
    return library.resolve().name.removeprefix("libnccl.so.")
