"""The GPU models and server boards k3ops knows: what a deploy may expect of a host.

Inventory data names a `hardware_profile`; the spec fills in or checks the host's GPU data from it, and
the lab's simulated hosts are built on the same boards and models (`k3ops_lab.profiles` adds what its
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
    # The compute fabric's RDMA NIC ports (InfiniBand or RoCE), one per GPU on these boards, and the rate each
    # must link at: what the fabric pre-checks expect of a host before NCCL runs across hosts.
    rdma_ports: int = 0
    rdma_rate_gbps: int = 0


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
        # HGX H100/H200/B200 reference designs: eight ConnectX-7 NDR 400 Gb/s ports (one per GPU).
        BoardProfile("h100x8", "NVIDIA H100 80GB HBM3", 8, nvswitch=True, rdma_ports=8, rdma_rate_gbps=400),
        BoardProfile("h200x8", "NVIDIA H200", 8, nvswitch=True, rdma_ports=8, rdma_rate_gbps=400),
        BoardProfile("b200x8", "NVIDIA B200", 8, nvswitch=True, nvlink_subnet_manager=True, rdma_ports=8,
                     rdma_rate_gbps=400),
        # B300 boards ship ConnectX-8 (800 Gb/s) as well; a fleet of those raises its thresholds in group data.
        BoardProfile("b300x8", "NVIDIA B300 SXM6 AC", 8, nvswitch=True, nvlink_subnet_manager=True, rdma_ports=8,
                     rdma_rate_gbps=400),
        BoardProfile("gb200x4", "NVIDIA GB200", 4, nvswitch=False, nvlink_domain=True, rdma_ports=4,
                     rdma_rate_gbps=400),
        BoardProfile("gb300x4", "NVIDIA GB300", 4, nvswitch=False, nvlink_domain=True, rdma_ports=4,
                     rdma_rate_gbps=400),
        # AMD's MI300X/MI355X platforms: eight 400 Gb/s backend NICs (AMD system-acceptance docs: "400000").
        BoardProfile("mi300x8", "AMD Instinct MI300X", 8, nvswitch=False, rdma_ports=8, rdma_rate_gbps=400),
        BoardProfile("mi355x8", "AMD Instinct MI355X", 8, nvswitch=False, rdma_ports=8, rdma_rate_gbps=400),
        BoardProfile("cpu", None, 0, nvswitch=False),
    )
}

# The newest CUDA each NVIDIA driver branch supports (NVIDIA's CUDA toolkit release notes).
CUDA_BY_DRIVER_BRANCH: dict[int, str] = {550: "12.4", 555: "12.5", 560: "12.6", 565: "12.7", 570: "12.8",
                                         575: "12.9", 580: "13.0", 590: "13.1"}


def cuda_supported_by(branch: int) -> str | None:
    """The CUDA version a driver branch supports: the nearest known branch at or below it."""
    known = [b for b in CUDA_BY_DRIVER_BRANCH if b <= branch]
    return CUDA_BY_DRIVER_BRANCH[max(known)] if known else None


# What AMD's Instinct optimization guides ask of the kernel command line: IOMMU passthrough, no PCI BAR
# reallocation (the ROCm deploy sets them, the fabric check and the host checks look for them).
AMD_KERNEL_ARGUMENTS = ("iommu=pt", "pci=realloc=off")
# GPUDirect RDMA over DMA-BUF needs Linux 5.12 or later.
DMABUF_MINIMUM_KERNEL = (5, 12)


def kernel_supports_dmabuf(release: str) -> bool:
    major, minor = (int(part) for part in release.split(".")[:2])
    return (major, minor) >= DMABUF_MINIMUM_KERNEL


# The DCGM exporter release NVIDIA builds on each DCGM release (its image tags: 4.4.1-4.6.0 is exporter 4.6.0 on
# DCGM 4.4.1), as the CUDA repository's datacenter-gpu-manager-exporter package versions it. An exporter needs a host
# engine at least as new as the one it was built on.
DCGM_EXPORTER_PAIRS = {"4.4.1": "4.6.0-1"}
