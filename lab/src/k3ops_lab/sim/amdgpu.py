"""What the amdgpu driver and KFD report about each simulated AMD GPU.

rocm-smi and amd-smi read the same kernel interfaces on a real host, so both simulators take their
identities (KFD node id and gpu_id), partition modes, idle sensor readings and firmware from here
and always agree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from .host import SimHost

VENDOR_NAME = "Advanced Micro Devices, Inc. [AMD/ATI]"
MEMORY_PARTITION = "NPS1"
COMPUTE_PARTITION = "SPX"
PARTITION_ID = 0
PERFORMANCE_LEVEL = "auto"
MEMORY_CLOCK_MHZ = 2000  # HBM3E on MI355X, constant at idle
# Deterministic idle readings: base value plus a small spread by GPU index.
IDLE_JUNCTION_C = (40, 6)
IDLE_SOCKET_POWER_W = (238, 41)
IDLE_SCLK_MHZ = (972, 64)
KFD_GPU_ID_RANGE = 65535

# Firmware blocks as amdsmi names them, with the raw numbers the driver reports.
FIRMWARE = (
    ("CP_MEC1", 193), ("CP_MEC2", 193), ("RLC", 70), ("SDMA0", 20), ("SDMA1", 20), ("VCN", 0x0A11701A),
    ("RLC_RESTORE_LIST_GPM_MEM", 4), ("RLC_RESTORE_LIST_SRM_MEM", 4), ("RLC_RESTORE_LIST_CNTL", 4),
    ("PSP_SOSDRV", 0x0036025D), ("TA_RAS", 0x1B000157), ("TA_XGMI", 0x20000019), ("PM", 0x00557200),
)
# amdsmi prints these as dotted hex bytes, PM as dotted decimal bytes, the rest as plain numbers.
HEX_FORMAT_FIRMWARE = {"PSP_SOSDRV", "TA_RAS", "TA_XGMI", "UVD", "VCE", "VCN"}
DECIMAL_FORMAT_FIRMWARE = {"PM"}


@dataclass(frozen=True)
class AmdGpu:
    index: int
    bus_id: str
    uuid: str
    node_id: int  # KFD topology node (CPU nodes come first)
    gpu_id: int  # KFD gpu_id: rocm-smi's GUID, amd-smi's KFD_ID
    name: str
    device_id: str
    subsystem_id: str
    revision: str
    vbios: str
    gfx_version: str
    power_cap_w: int
    junction_c: float
    socket_power_w: float
    sclk_mhz: int

    @property
    def sku(self) -> str:
        """The SKU is what sits between the two dashes of the VBIOS version (113-M3550101-100)."""
        parts = self.vbios.split("-")
        return parts[1] if len(parts) == 3 and len(parts[1]) > 1 else "N/A"


def driver_loaded(host: SimHost) -> bool:
    return host.amdgpu_module_version() is not None


def amd_gpus(host: SimHost) -> list[AmdGpu]:
    """The GPUs the amdgpu driver enumerated, in DRM card order."""
    hardware = host.hardware()
    model = hardware["gpu_model"]
    cpu_nodes = len({gpu["numa_node"] for gpu in hardware["gpus"]})
    return [
        AmdGpu(
            index=index,
            bus_id=gpu["pci_bus_id"],
            uuid=gpu["uuid"],
            node_id=cpu_nodes + index,
            gpu_id=1 + int(gpu["uuid"].replace("-", ""), 16) % KFD_GPU_ID_RANGE,
            name=model["name"],
            device_id=model["pci_device_id"],
            subsystem_id=model["pci_subsystem_id"],
            revision="0x00",
            vbios=model["vbios_version"],
            gfx_version=model["compute_capability"],
            power_cap_w=model["power_limit_w"],
            junction_c=float(_spread(IDLE_JUNCTION_C, index)),
            socket_power_w=float(_spread(IDLE_SOCKET_POWER_W, index)),
            sclk_mhz=_spread(IDLE_SCLK_MHZ, index),
        )
        for index, gpu in enumerate(host.visible_gpus())
    ]


def firmware_version(block: str, raw: int) -> str:
    """A firmware version formatted the way amdsmi formats that block."""
    digits = f"{raw:08x}"
    pairs = [digits[i:i + 2] for i in range(0, 8, 2)]
    if block in HEX_FORMAT_FIRMWARE:
        return ".".join(pairs).upper()
    if block in DECIMAL_FORMAT_FIRMWARE:
        return ".".join(str(int(pair, 16)).zfill(2) for pair in pairs)
    return str(raw)


def _spread(base_and_range: tuple[int, int], index: int) -> int:
    base, width = base_and_range
    return base + (index * 7) % width
