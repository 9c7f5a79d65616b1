"""The bus bandwidth each test must reach, per hardware profile: published figures, then the fleet's own.

A fleet overrides any figure in group data (`nccl_thresholds`), or records its own baseline
(`nccl_baseline`, what `k3ops nccl check --baseline` prints) and is then judged against
`nccl_baseline_fraction` of it. Figures are GB/s of nccl-tests' busbw at the target message size (8 GiB),
the lower of out-of-place and in-place.
"""

from __future__ import annotations

from ..settings.fabric import TestKind

COLLECTIVES: dict[TestKind, str] = {"host_all_reduce": "all_reduce", "cluster_all_reduce": "all_reduce",
                                    "cluster_alltoall": "alltoall", "host_nic_loopback": "all_reduce"}

# Eight 400 Gb/s NICs between hosts: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (AddyLaddy, NVIDIA,
# nccl-tests#290; "up to 48-49GB/s per NIC", nccl-tests#267) and "With 8 400 Gbps NICs your peak would be at
# 400 GB/s" (kiskra-nvidia, nccl-tests#309); measured 386.6 GB/s on 8x8 H100 (CoreWeave) and 381.8 on 4x B200
# (ml-engineering). 340 is 0.9 x 8 x 47: a host with one port down (7/8 of the ring) falls below it.
EIGHT_NDR_NICS_ALL_REDUCE = 340.0
# "Alltoall cannot aggregate the bandwidth of multiple NICs, so the performance you should see is the
# performance of a single NIC" (sjeaugey, nccl-tests#267): 46-49 GB/s at 400 Gb/s; ROCm CVS's 2-node alltoall
# threshold is 45 GB/s at 8 GiB (cvs/input/config_file/rccl/rccl_config.json). 40 leaves noise room.
NDR_NIC_ALLTOALL = 40.0
# Azure NHC nd96asr_v4.conf: all_reduce at 8 GB with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 must reach 18 GB/s on
# eight HDR 200 Gb/s NICs; the same path at 400 Gb/s (NDR), scaled by the rate. No figure is published for NDR.
NDR_NIC_LOOPBACK = 36.0

PUBLISHED: dict[str, dict[TestKind, float]] = {
    # Azure NHC nd96isr_h100_v5.conf: single-node all_reduce >= 460 GB/s; NVIDIA: "On 8 GPUs, you should reach
    # a peak busBw of ~480GB/s" (sjeaugey, nccl-tests#212).
    "h100x8": {"host_all_reduce": 460.0, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    # Azure NHC nd96isr_h200_v5.conf: >= 431 GB/s (measured 478-480 at 8-16 GiB: Azure ND H200 v5 results,
    # ml-engineering 8xH200 NVLS).
    "h200x8": {"host_all_reduce": 431.0, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    # 8xB200 NVLS measured 838 GB/s at 8 GiB (ml-engineering, nccl 2.27.7); users report "830+" (nccl#1807).
    "b200x8": {"host_all_reduce": 760.0, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    # No primary B300 figure was found: NVLink 5 as on B200 (830-845 GB/s), so B200's threshold.
    "b300x8": {"host_all_reduce": 760.0, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    # GB200 tray (4 GPUs): ~663 GB/s at 8 GiB; two trays of one NVL72 over NVLink 891.6-895.5 GB/s (OCI
    # oci-gpu-quickstarts README-GB200.md). GB300: no primary figure; the GB200 ones, 0.9 of them. Trays of one
    # NVLink domain exchange expert traffic over NVLink too, so alltoall is held to the NVLink figure's half.
    "gb200x4": {"host_all_reduce": 600.0, "cluster_all_reduce": 800.0, "cluster_alltoall": 300.0,
                "host_nic_loopback": NDR_NIC_LOOPBACK},
    "gb300x4": {"host_all_reduce": 600.0, "cluster_all_reduce": 800.0, "cluster_alltoall": 300.0,
                "host_nic_loopback": NDR_NIC_LOOPBACK},
    # AMD system-acceptance-docs (rccl-benchmarking.md): in-place busbw at 8 GB must exceed 304 GB/s (MI300X)
    # or 350 GB/s (MI350X/MI355X), on one node and on a 2-node RCCL fabric test; ROCm CVS alltoall 45 GB/s.
    "mi300x8": {"host_all_reduce": 304.0, "cluster_all_reduce": 304.0, "cluster_alltoall": NDR_NIC_ALLTOALL,
                "host_nic_loopback": NDR_NIC_LOOPBACK},
    "mi355x8": {"host_all_reduce": 350.0, "cluster_all_reduce": 350.0, "cluster_alltoall": NDR_NIC_ALLTOALL,
                "host_nic_loopback": NDR_NIC_LOOPBACK},
}


def threshold(profile: str, kind: TestKind, overrides: dict[str, float], baseline: dict[str, float],
              baseline_fraction: float) -> tuple[float | None, str]:
    """The figure a test must reach and where it comes from: the fleet's override, else a fraction of its
    baseline, else the published figure (None: nothing known for this profile, the test is not judged)."""
    if kind in overrides:
        return overrides[kind], "nccl_thresholds"
    if kind in baseline:
        return round(baseline[kind] * baseline_fraction, 1), f"{baseline_fraction:g} x nccl_baseline"
    published = PUBLISHED.get(profile, {}).get(kind)
    return published, "published" if published is not None else "none"
