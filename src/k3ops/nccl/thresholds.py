"""The bus bandwidth each test must reach, per hardware profile: published figures, then the fleet's own.

A fleet overrides any figure in group data (`nccl_thresholds`), or records its own baseline
(`nccl_baseline`, what `k3ops nccl check --baseline` prints) and is then judged against
`nccl_baseline_fraction` of it. Figures are GB/s of nccl-tests' busbw at the target message size (8 GiB),
the lower of out-of-place and in-place. Every figure says who published it; where nobody has, the figure is
None with the reason, and only the fleet's baseline judges that test.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings.fabric import TestKind

COLLECTIVES: dict[TestKind, str] = {"host_all_reduce": "all_reduce", "cluster_all_reduce": "all_reduce",
                                    "cluster_alltoall": "alltoall", "host_nic_loopback": "all_reduce"}
BASELINE_ADVICE = "record the fleet's own with `k3ops nccl check INVENTORY --baseline` (nccl_baseline)"


@dataclass(frozen=True)
class Figure:
    """A published floor (GB/s), or None where nobody has published one, and who says so (or why none)."""

    gbps: float | None
    source: str


# Eight 400 Gb/s NICs between hosts: "For NDR @ 400Gbps you should see 46-48GB/s per NIC" (AddyLaddy, NVIDIA,
# nccl-tests#290; "up to 48-49GB/s per NIC", nccl-tests#267) and "With 8 400 Gbps NICs your peak would be at
# 400 GB/s" (kiskra-nvidia, nccl-tests#309); measured 386.6 GB/s on 8x8 H100 (CoreWeave) and 381.8 on 4x B200
# (ml-engineering). 340 is 0.9 x 8 x 47: a host with one port down (7/8 of the ring) falls below it.
EIGHT_NDR_NICS_ALL_REDUCE = Figure(340.0, "0.9 x 8 x 47 GB/s per NDR NIC (NVIDIA, nccl-tests#290, #309)")
# "Alltoall cannot aggregate the bandwidth of multiple NICs, so the performance you should see is the
# performance of a single NIC" (sjeaugey, nccl-tests#267): 46-49 GB/s at 400 Gb/s; ROCm CVS's 2-node alltoall
# threshold is 45 GB/s at 8 GiB (ROCm/cvs cvs/input/config_file/rccl/rccl_config.json).
NDR_NIC_ALLTOALL = Figure(45.0, "ROCm CVS rccl_config.json alltoall 45 GB/s at 8 GiB; one NDR NIC 46-49 "
                                "(sjeaugey, nccl-tests#267)")
# Azure's node health check runs all_reduce on one host with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 ("IB
# loopback"): on ND H100 v5 (eight NDR 400 Gb/s NICs) a failing host reads "expected >=40.0 GB/s"
# (Azure/azurehpc-health-checks@0e0a1ac distributed_nhc/README.md, a real health.log; nd96asr_v4.conf asks 18 on
# eight HDR 200 Gb/s).
NDR_NIC_LOOPBACK = Figure(40.0, "Azure NHC check_nccl_allreduce_ib_loopback on ND H100 v5 NDR: >= 40.0 "
                                "(azurehpc-health-checks distributed_nhc/README.md)")
# The NVLink 4 board of H100 and H200 (18 links per GPU, 478-480 GB/s measured on 8xH200 at 8-16 GiB: Azure ND
# H200 v5 results, ml-engineering's 8xH200 NVLS): Azure NHC nd96isr_h100_v5.conf asks 460; its
# nd96isr_h200_v5.conf asks 431, about 10% under those healthy figures, so H200 is held to H100's 460.
NVLINK4_HOST_ALL_REDUCE = Figure(460.0, "Azure NHC nd96isr_h100_v5.conf check_nccl_allreduce 460 (H200 on the same "
                                        "NVLink 4 measures 478-480)")
NO_FIGURE_B300 = "no published B300 figure: NVLink 5 and, on ConnectX-8 boards, 800 Gb/s NICs"
NO_FIGURE_NVL_DOMAIN = ("no published figure for GB200/GB300 trays under the check's Ring algorithm, and trays of one "
                        "NVLink domain and of two differ")

PUBLISHED: dict[str, dict[TestKind, Figure]] = {
    "h100x8": {"host_all_reduce": NVLINK4_HOST_ALL_REDUCE, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    "h200x8": {"host_all_reduce": NVLINK4_HOST_ALL_REDUCE, "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE,
               "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    # 8xB200 NVLS measured 838 GB/s at 8 GiB (ml-engineering, nccl 2.27.7); users report "830+" (nccl#1807).
    "b200x8": {"host_all_reduce": Figure(760.0, "0.9 x 838 GB/s measured on 8xB200 NVLS (ml-engineering; nccl#1807 "
                                                "830+)"),
               "cluster_all_reduce": EIGHT_NDR_NICS_ALL_REDUCE, "cluster_alltoall": NDR_NIC_ALLTOALL,
               "host_nic_loopback": NDR_NIC_LOOPBACK},
    # B300 boards ship ConnectX-8 (800 Gb/s) as well as ConnectX-7: the NDR figures would pass a port at half rate.
    "b300x8": {kind: Figure(None, NO_FIGURE_B300) for kind in COLLECTIVES},
    # GB200 tray (4 GPUs): ~663 GB/s at 8 GiB (OCI oci-gpu-quickstarts README-GB200.md). Two trays of one NVL72
    # measured 891.6-895.5 GB/s with NCCL's own choice of algorithm; the check forces Ring, under which no figure
    # is published, and cannot tell whether two trays share an NVLink domain.
    "gb200x4": {"host_all_reduce": Figure(600.0, "0.9 x 663 GB/s measured on one GB200 tray (OCI oci-gpu-quickstarts "
                                                 "README-GB200.md)"),
                "cluster_all_reduce": Figure(None, NO_FIGURE_NVL_DOMAIN),
                "cluster_alltoall": Figure(None, NO_FIGURE_NVL_DOMAIN), "host_nic_loopback": NDR_NIC_LOOPBACK},
    "gb300x4": {"host_all_reduce": Figure(None, "no published GB300 tray figure"),
                "cluster_all_reduce": Figure(None, NO_FIGURE_NVL_DOMAIN),
                "cluster_alltoall": Figure(None, NO_FIGURE_NVL_DOMAIN), "host_nic_loopback": NDR_NIC_LOOPBACK},
    # AMD system-acceptance-docs (rccl-benchmarking.md): in-place busbw at 8 GB must exceed 304 GB/s (MI300X)
    # or 350 GB/s (MI350X/MI355X), on one node and on a 2-node RCCL fabric test; ROCm CVS alltoall 45 GB/s.
    "mi300x8": {"host_all_reduce": Figure(304.0, "AMD system-acceptance-docs rccl-benchmarking.md: 304 (MI300X)"),
                "cluster_all_reduce": Figure(304.0, "AMD system-acceptance-docs rccl-benchmarking.md: 304 (MI300X)"),
                "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
    "mi355x8": {"host_all_reduce": Figure(350.0, "AMD system-acceptance-docs rccl-benchmarking.md: 350 (MI355X)"),
                "cluster_all_reduce": Figure(350.0, "AMD system-acceptance-docs rccl-benchmarking.md: 350 (MI355X)"),
                "cluster_alltoall": NDR_NIC_ALLTOALL, "host_nic_loopback": NDR_NIC_LOOPBACK},
}


def threshold(profile: str, kind: TestKind, overrides: dict[str, float], baseline: dict[str, float],
              baseline_fraction: float) -> tuple[float | None, str]:
    """The figure a test must reach and where it comes from: the fleet's override, else a fraction of its
    baseline, else the published figure (None, with why none and what to do: the test is not judged on speed)."""
    if kind in overrides:
        return overrides[kind], "nccl_thresholds"
    if kind in baseline:
        return round(baseline[kind] * baseline_fraction, 1), f"{baseline_fraction:g} x nccl_baseline"
    published = PUBLISHED.get(profile, {}).get(kind)
    if published is None:
        return None, f"no figure for hardware_profile {profile!r}: {BASELINE_ADVICE}"
    if published.gbps is None:
        return None, f"{published.source}: {BASELINE_ADVICE}"
    return published.gbps, f"published: {published.source}"
