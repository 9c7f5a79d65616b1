"""The GPU models and server boards k3ops knows: what a deploy may expect of a host.

Inventory data names a `hardware_profile`; the spec fills in or checks the host's GPU data from it, and
the lab's simulated hosts are built on the same boards and models (`k3ops.lab.profiles` adds what its
simulator shows of them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    name: str  # as nvidia-smi / rocm-smi print it
    vendor: str  # "nvidia" or "amd"
    architecture: str  # "Hopper", "Blackwell", "CDNA3", "CDNA4"


@dataclass(frozen=True)
class BoardProfile:
    name: str
    gpu_model: str | None
    gpu_count: int
    nvswitch: bool  # an HGX baseboard whose NVSwitches need fabric manager
    # NVLink 5 switch trays (Blackwell HGX): fabric manager drives them through NVIDIA's NVLink subnet manager
    nvlink_subnet_manager: bool = False
    # GPUs in a multi-node NVLink domain (GB200/GB300 NVL72 trays): memory across trays needs nvidia-imex
    nvlink_domain: bool = False


GPU_MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel("NVIDIA H100 80GB HBM3", "nvidia", "Hopper"),
        GpuModel("NVIDIA H200", "nvidia", "Hopper"),
        GpuModel("NVIDIA B200", "nvidia", "Blackwell"),
        GpuModel("NVIDIA B300 SXM6 AC", "nvidia", "Blackwell"),
        GpuModel("NVIDIA GB200", "nvidia", "Blackwell"),
        GpuModel("NVIDIA GB300", "nvidia", "Blackwell"),
        GpuModel("AMD Instinct MI300X", "amd", "CDNA3"),
        GpuModel("AMD Instinct MI325X", "amd", "CDNA3"),
        GpuModel("AMD Instinct MI350X", "amd", "CDNA4"),
        GpuModel("AMD Instinct MI355X", "amd", "CDNA4"),
    )
}

# The oldest ROCm release that supports each AMD GPU architecture (AMD's ROCm compatibility matrix):
# CDNA3 (MI300X, MI325X, gfx942) since ROCm 6.0, CDNA4 (MI350X, MI355X, gfx950) since ROCm 7.0.
ROCM_MINIMUM_BY_ARCHITECTURE: dict[str, str] = {"CDNA3": "6.0.0", "CDNA4": "7.0.0"}

BOARD_PROFILES: dict[str, BoardProfile] = {
    profile.name: profile
    for profile in (
        BoardProfile("h100x8", "NVIDIA H100 80GB HBM3", 8, nvswitch=True),
        BoardProfile("h200x8", "NVIDIA H200", 8, nvswitch=True),
        BoardProfile("b200x8", "NVIDIA B200", 8, nvswitch=True, nvlink_subnet_manager=True),
        BoardProfile("b300x8", "NVIDIA B300 SXM6 AC", 8, nvswitch=True, nvlink_subnet_manager=True),
        BoardProfile("gb200x4", "NVIDIA GB200", 4, nvswitch=False, nvlink_domain=True),
        BoardProfile("gb300x4", "NVIDIA GB300", 4, nvswitch=False, nvlink_domain=True),
        BoardProfile("mi300x8", "AMD Instinct MI300X", 8, nvswitch=False),
        BoardProfile("mi355x8", "AMD Instinct MI355X", 8, nvswitch=False),
        BoardProfile("cpu", None, 0, nvswitch=False),
    )
}

# The newest CUDA each NVIDIA driver branch supports (NVIDIA's CUDA toolkit release notes).
CUDA_BY_DRIVER_BRANCH: dict[int, str] = {550: "12.4", 560: "12.6", 565: "12.7", 570: "12.8", 575: "12.9",
                                         580: "13.0", 590: "13.1"}


def cuda_supported_by(branch: int) -> str | None:
    """The CUDA version a driver branch supports: the nearest known branch at or below it."""
    known = [b for b in CUDA_BY_DRIVER_BRANCH if b <= branch]
    return CUDA_BY_DRIVER_BRANCH[max(known)] if known else None
