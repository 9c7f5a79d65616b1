"""all_reduce_perf of the lab's nccl-tests 2.17.6 (built against NCCL 2.28.7), single process, -g GPUs.

The report is formatted by nccl-tests' own format strings (src/util.cu at v2.17.6); the numbers come
from a latency + bandwidth model of the host's NVLink fabric instead of a measurement:

    time(size) = LATENCY_US[fabric] + size * max(2(n-1)/n, 1) / peak_bus_bandwidth
    peak_bus_bandwidth = (fewest active NVLinks of any rank) * link speed

so an HGX H200 (18 links x 26.562 GB/s) tops out near 478 GB/s bus bandwidth at 8 GiB, small
messages are latency-bound, and NVLinks marked down in the host's faults ("nvlink_down_links")
lower the whole ring, as a degraded link does on real hardware.
"""

from __future__ import annotations

import os
import sys

from . import nvidia_devices as devices
from .host import SimHost
from .nvidia_devices import DriverState, NvidiaGpu

PROGRAM = "all_reduce_perf"
NCCL_TESTS_VERSION = "2.17.6"
NCCL_HEADERS_VERSION = "2.28.7"
FLOAT_BYTES = 4
LATENCY_US = {"nvswitch": 12.0, "nvlink-domain": 14.0}
PCIE_BUS_BANDWIDTH_GBPS = 24.0  # what NCCL gets through PCIe and host memory when NVLink is gone
IN_PLACE_TIME_SHARE = 0.997  # in-place skips one buffer, a hair faster

DEFAULTS = {"nthreads": 1, "ngpus": 1, "minbytes": 32 << 20, "maxbytes": 32 << 20, "stepbytes": 1 << 20,
            "stepfactor": 1, "iters": 20, "agg_iters": 1, "warmup_iters": 1, "check": 1}
# getopt_long of nccl-tests: short letter and long name of each option taking a value.
OPTIONS = {"t": "nthreads", "g": "ngpus", "b": "minbytes", "e": "maxbytes", "i": "stepbytes", "f": "stepfactor",
           "n": "iters", "m": "agg_iters", "w": "warmup_iters", "c": "check"}
SIZE_OPTIONS = {"minbytes", "maxbytes", "stepbytes"}
SIZE_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

HEADER = (
    "# nccl-tests version {tests} nccl-headers={headers} nccl-library={library}",
    "# Collective test starting: {program}",
    "# nThread {nthreads} nGpus {ngpus} minBytes {minbytes} maxBytes {maxbytes} step: {step} warmup iters: "
    "{warmup_iters} iters: {iters} agg iters: {agg_iters} validation: {check} graph: 0",
    "#",
    "# Using devices",
)
DEVICE_LINE = "#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {device:2d} [{pci}] {name}"
TABLE_HEADER = (
    "#",
    f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place          ",
    f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
    f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} {'':>20}",
    f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
    f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} {'':>20}",
)
ROW_PREAMBLE = "{size:12d}  {count:12d}  {type:>8}  {op:>6}  {root:>6}"
ROW_RESULT = "  {time:>7}  {algbw:>6}  {busbw:>6}  {wrong:>6}"
FOOTER = (
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : {average:g} ",
    "#",
    "# Collective test concluded: {program}",
    "",
)
# What the binary prints when it cannot run (common.h CUDACHECK/TESTCHECK at these source lines).
MISSING_NCCL = (f"{PROGRAM}: error while loading shared libraries: libnccl.so.2: "
                "cannot open shared object file: No such file or directory")
CUDA_FAILURE = "{host}: Test CUDA failure util.cu:553 '{error}'"
TEST_FAILURE = " .. {host} pid {pid}: Test failure common.cu:1100"
CUDA_ERRORS = {
    DriverState.NO_KERNEL_MODULE: "no CUDA-capable device is detected",
    DriverState.VERSION_MISMATCH: "system has unsupported display driver / cuda driver combination",
}
TOO_FEW_GPUS = (
    "Invalid number of GPUs: {wanted} requested but only {found} were found.\n"
    "Please check the number of processes and GPUs per process."
)
EXIT_MISSING_LIBRARY = 127
EXIT_CUDA_ERROR = 2  # testCudaError
EXIT_NOT_IMPLEMENTED = 5  # testNotImplemented


def main(argv: list[str], host: SimHost | None = None) -> int:
    host = host or SimHost()
    library = devices.nccl_library_version(host)
    if library is None:
        print(MISSING_NCCL, file=sys.stderr)
        return EXIT_MISSING_LIBRARY
    try:
        settings = _parse(argv)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    hostname, pid = host.hardware()["hostname"].split(".")[0], os.getpid()
    step = f"{settings['stepfactor']}(factor)" if settings["stepfactor"] > 1 else f"{settings['stepbytes']}(bytes)"
    print("\n".join(HEADER).format(tests=NCCL_TESTS_VERSION, headers=_version_code(NCCL_HEADERS_VERSION),
                                   library=_version_code(library), program=PROGRAM, step=step, **settings))
    state = devices.driver_state(host)
    if state is not DriverState.READY:
        print(CUDA_FAILURE.format(host=hostname, error=CUDA_ERRORS[state]))
        print(TEST_FAILURE.format(host=hostname, pid=pid))
        return EXIT_CUDA_ERROR
    gpus = devices.nvidia_gpus(host)
    wanted = settings["nthreads"] * settings["ngpus"]
    if wanted > len(gpus):
        print(TOO_FEW_GPUS.format(wanted=wanted, found=len(gpus)), file=sys.stderr)
        print(TEST_FAILURE.format(host=hostname, pid=pid))
        return EXIT_NOT_IMPLEMENTED
    ranks = gpus[:wanted]
    lines = [DEVICE_LINE.format(rank=rank, pid=pid, host=hostname, device=gpu.index,
                                pci=f"{gpu.pci.domain:04x}:{gpu.pci.bus:02x}:{gpu.pci.device:02x}", name=gpu.name)
             for rank, gpu in enumerate(ranks)]
    lines += TABLE_HEADER
    bus_bandwidths = []
    fabric = host.hardware()["fabric"]
    for size in _sizes(settings):
        count = size // FLOAT_BYTES
        row = ROW_PREAMBLE.format(size=count * FLOAT_BYTES, count=count, type="float", op="sum", root=-1)
        for time_share in (1.0, IN_PLACE_TIME_SHARE):
            time_us = _time_us(fabric, ranks, count * FLOAT_BYTES) * time_share
            algbw = count * FLOAT_BYTES / (time_us * 1e3)
            busbw = algbw * _bus_factor(len(ranks))
            bus_bandwidths.append(busbw)
            row += ROW_RESULT.format(time=_float_cell(time_us, 7), algbw=_float_cell(algbw, 6),
                                     busbw=_float_cell(busbw, 6), wrong=0)
        lines.append(row)
    average = sum(bus_bandwidths) / len(bus_bandwidths)
    lines += [line.format(average=average, program=PROGRAM) for line in FOOTER]
    print("\n".join(lines))
    return 0


def _parse(argv: list[str]) -> dict[str, int]:
    settings = dict(DEFAULTS)
    arguments = list(argv)
    while arguments:
        argument = arguments.pop(0)
        name, has_value, value = argument.lstrip("-").partition("=")
        key = OPTIONS.get(name, name)
        if key not in DEFAULTS:
            raise ValueError(f"{PROGRAM} (k3ops lab): option {argument} is not simulated")
        if not has_value:
            value = arguments.pop(0)
        settings[key] = _size(value) if key in SIZE_OPTIONS else int(value, 0)
    return settings


def _size(text: str) -> int:
    """nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024)."""
    multiplier = SIZE_SUFFIXES.get(text[-1].upper())
    return int(float(text[:-1]) * multiplier) if multiplier else int(float(text))


def _version_code(version: str) -> int:
    major, minor, patch = (int(part) for part in version.split("."))
    return major * 10000 + minor * 100 + patch


def _sizes(settings: dict[str, int]) -> list[int]:
    sizes, size = [], settings["minbytes"]
    while size <= settings["maxbytes"]:
        sizes.append(size)
        size = size * settings["stepfactor"] if settings["stepfactor"] > 1 else size + settings["stepbytes"]
    return sizes


def _bus_factor(ranks: int) -> float:
    """busbw = algbw * 2(n-1)/n for all-reduce (nccl-tests doc/PERFORMANCE.md)."""
    return 2 * (ranks - 1) / ranks


def _time_us(fabric: str, ranks: list[NvidiaGpu], size: int) -> float:
    nvlink_gbps = min(gpu.active_nvlinks for gpu in ranks) * ranks[0].model["nvlink_speed_gbps"]
    peak_gbps = max(nvlink_gbps, PCIE_BUS_BANDWIDTH_GBPS)
    moved = size * max(_bus_factor(len(ranks)), 1.0)
    return LATENCY_US[fabric] + moved / (peak_gbps * 1e3)


def _float_cell(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: as many decimals as fit the column, then exponent form."""
    power, bound = 0, 1
    while value >= bound:
        power, bound = power + 1, bound * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"
