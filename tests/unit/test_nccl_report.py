"""nccl-tests and rccl-tests reports read from every real capture, and from text the tools' own printf formats
make for what no capture shows (the lab's simulated reports are read in tests/lab/unit)."""

import pytest

from k3ops.nccl.report import busbw_at, parse, parse_runs, row_at, wrong_values

from ..conftest import REAL_FIXTURES

CAPTURES = REAL_FIXTURES / "nccl-tests"
# Each capture's provenance lines end with this one; what follows is the tool output as published.
VERBATIM_MARKER = "# ---- verbatim below ----\n"
GIB = 1 << 30

# Read by eye from each capture, one entry per run it holds. A new capture fails until it has its own.
EXPECTED = {
    "01_nccl_allreduce_h100_2node_16gpu.txt": [dict(
        # nccl-tests before 2.17.4 print no version line, and nothing else names the tool.
        tool=None, tests_version=None, library_version=None, collective=None,
        ranks=16, hosts={"ztan-mig-235z", "ztan-mig-gq73"}, rows=31, largest=8 * GIB, busbw=337.35,
        out_of_bounds=0, average=70.742)],
    "04_rccl_allreduce_mi300x_1node_8gpu.txt": [dict(
        tool="rccl-tests", tests_version="develop:a7809b3", library_version=None, collective=None,
        ranks=8, hosts={"1942ef50-8240-449e-82ca-4ce7993f70b4-78bfb5d4f4-4z9xh"}, rows=31, largest=8 * GIB,
        busbw=315.69, out_of_bounds=0, average=110.464)],
    "07_rccl_allreduce_alltoall_mi355x_1node_8gpu_oci.txt": [
        dict(tool="rccl-tests", tests_version="HEAD:e1b8a3a", library_version=None, collective="all_reduce_perf",
             ranks=8, hosts={"GPU-6403"}, rows=2, largest=16 * GIB, busbw=406.73, out_of_bounds=0, average=273.886),
        dict(tool="rccl-tests", tests_version="HEAD:e1b8a3a", library_version=None, collective="alltoall_perf",
             ranks=8, hosts={"GPU-6403"}, rows=2, largest=16 * GIB, busbw=361.20, out_of_bounds=0, average=236.187),
    ],
    "08_nccl_allreduce_v2.18_format_socket_2rank_tagged.txt": [dict(
        tool="nccl-tests", tests_version="2.18.0", library_version="2.29.7", collective="all_reduce_perf_mpi",
        ranks=2, hosts={"lab"}, rows=8, largest=128 << 20, busbw=2.30, out_of_bounds=0, average=1.57614)],
}


def capture(name):
    """A capture's tool output, without the provenance lines above it."""
    text = (CAPTURES / name).read_text()
    assert VERBATIM_MARKER in text, f"{name}: no {VERBATIM_MARKER.strip()!r} line after its provenance"
    return text.partition(VERBATIM_MARKER)[2]


@pytest.mark.parametrize("name", sorted(path.name for path in CAPTURES.glob("*.txt")))
def test_every_capture_reads_as_seen_by_eye(name):
    assert name in EXPECTED, f"{name} is new: read it and add what it shows to EXPECTED"
    reports = parse_runs(capture(name))
    seen = [dict(tool=report.tool, tests_version=report.tests_version, library_version=report.library_version,
                 collective=report.collective, ranks=len(report.ranks), hosts={rank.host for rank in report.ranks},
                 rows=len(report.rows), largest=report.rows[-1].size_bytes,
                 busbw=busbw_at(report, report.rows[-1].size_bytes), out_of_bounds=report.out_of_bounds,
                 average=report.average_busbw) for report in reports]
    assert seen == EXPECTED[name]
    assert all(report.finished and report.out_of_bounds_ok and report.warnings == [] for report in reports)


@pytest.mark.parametrize("name", sorted(path.name for path in CAPTURES.glob("*.txt")))
def test_every_capture_has_its_ranks_in_order_and_each_size_once(name):
    for report in parse_runs(capture(name)):
        assert [rank.rank for rank in report.ranks] == list(range(len(report.ranks)))
        sizes = [row.size_bytes for row in report.rows]
        assert sizes == sorted(set(sizes))


def test_the_bandwidth_is_the_slower_half_of_the_row_not_the_footer_average():
    report = parse(capture("01_nccl_allreduce_h100_2node_16gpu.txt"))
    row = row_at(report, 8 * GIB)
    assert (row.count, row.type, row.redop) == (2147483648, "float", "sum")
    assert (row.out_of_place.time_us, row.out_of_place.algbw, row.out_of_place.busbw) == (47535, 180.71, 338.82)
    assert row.in_place.busbw == 337.35
    assert busbw_at(report, 8 * GIB) == 337.35
    assert report.average_busbw == 70.742  # every size from 8 bytes up, both halves


def test_the_out_of_place_half_can_be_the_slower():
    report = parse(capture("04_rccl_allreduce_mi300x_1node_8gpu.txt"))
    assert (row_at(report, 8 * GIB).out_of_place.busbw, row_at(report, 8 * GIB).in_place.busbw) == (315.69, 315.91)
    assert busbw_at(report, 8 * GIB) == 315.69


def test_a_size_the_run_did_not_measure_has_no_row():
    report = parse(capture("04_rccl_allreduce_mi300x_1node_8gpu.txt"))
    assert row_at(report, 3 * GIB) is None
    assert busbw_at(report, 3 * GIB) is None


def test_device_lines_give_rank_host_device_bus_and_name():
    report = parse(capture("01_nccl_allreduce_h100_2node_16gpu.txt"))
    assert [(rank.rank, rank.host, rank.device, rank.bus_id, rank.name) for rank in report.ranks[7:9]] == [
        (7, "ztan-mig-235z", 7, "0000:8c:00", "NVIDIA H100 80GB HBM3"),
        (8, "ztan-mig-gq73", 0, "0000:04:00", "NVIDIA H100 80GB HBM3"),
    ]


def test_alltoall_in_place_wrong_is_not_available_and_counts_zero():
    _, alltoall = parse_runs(capture("07_rccl_allreduce_alltoall_mi355x_1node_8gpu_oci.txt"))
    row = row_at(alltoall, 8 * GIB)
    assert (row.count, row.redop) == (268435456, "none")
    assert (row.out_of_place.wrong, row.in_place.wrong) == (0, None)
    assert wrong_values(alltoall) == 0


def test_one_report_is_refused_for_a_text_holding_two_runs():
    with pytest.raises(ValueError, match=r"2 test runs \(all_reduce_perf, alltoall_perf\).*parse_runs"):
        parse(capture("07_rccl_allreduce_alltoall_mi355x_1node_8gpu_oci.txt"))


def test_tagged_output_reads_as_untagged_and_its_stderr_noise_is_no_warning():
    text = capture("08_nccl_allreduce_v2.18_format_socket_2rank_tagged.txt")
    assert "[1,0]<stdout>:# nccl-tests version 2.18.0" in text
    report = parse(text)
    assert [(rank.rank, rank.host, rank.device, rank.bus_id, rank.name) for rank in report.ranks] == [
        (0, "lab", 0, "0000:02:00", "NVIDIA GeForce RTX 5090"), (1, "lab", 0, "0000:02:00", "NVIDIA GeForce RTX 5090")]
    assert (report.rows[0].size_bytes, report.rows[0].out_of_place.time_us) == (1048576, 4366.46)
    assert report.warnings == []


def test_warnings_are_kept_verbatim_without_their_mpi_tag():
    # A line in NCCL's log format (host:pid:tid [device] NCCL WARN message), tagged as mpirun tags it.
    warning = "lab:2994447:2994460 [0] NCCL WARN NET/Socket : peer 10.0.0.2<40517> closed the connection"
    text = capture("08_nccl_allreduce_v2.18_format_socket_2rank_tagged.txt").replace(
        "[1,0]<stdout>:# Out of bounds", f"[1,0]<stdout>:{warning}\n[1,0]<stdout>:# Out of bounds")
    assert parse(text).warnings == [warning]


def test_a_run_cut_short_has_its_complete_rows_and_no_footer():
    text = capture("01_nccl_allreduce_h100_2node_16gpu.txt")
    # Cut in the middle of the 32 MiB row, as a killed run leaves its output.
    row_32_mib = "    33554432       8388608     float     sum      -1   1059.9"
    cut = text[:text.index(row_32_mib)] + row_32_mib[:24]
    report = parse(cut)
    assert (len(report.rows), report.rows[-1].size_bytes) == (22, 16 << 20)
    assert not report.finished
    assert (report.out_of_bounds, report.out_of_bounds_ok, report.average_busbw) == (None, None, None)
    assert busbw_at(report, 8 * GIB) is None


def test_a_run_that_never_started_is_one_empty_report():
    report = parse("all_reduce_perf: error while loading shared libraries: libnccl.so.2: cannot open shared "
                   "object file: No such file or directory\n")
    assert (report.tool, report.ranks, report.rows, report.finished) == (None, [], [], False)


# rccl-tests' own printf formats (ROCm/rccl-tests@ae3e6357cb35 src/common.cu) for what no capture shows:
# device lines without Group and with the full BDF, the in-place-only table of -O 0, "# Testing N
# cycle." between the sweeps of -N 2, #wrong printed with %5g, an out-of-bounds failure.
RCCL_DEVICE = "#   Rank %2d Pid %6d on %10s device %2d [%s] %s"
RCCL_IN_PLACE_HEADER = (
    "# %10s  %12s  %8s  %6s  %6s           in-place          " % ("", "", "", "", ""),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s" % ("size", "count", "type", "redop", "root",
                                                       "time", "algbw", "busbw", "#wrong"),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s" % ("(B)", "(elements)", "", "", "",
                                                        "(us)", "(GB/s)", "(GB/s)", ""),
)
RCCL_ROW = "%12li  %12li  %8s  %6s  %6s" + "  %7s  %6.2f  %6.2f  %5g"


def rccl_in_place_report():
    lines = [
        "# nThread 1 nGpus 1 minBytes 4294967296 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "rccl-tests: Version develop:448c4c7",
        "# Using devices",
        RCCL_DEVICE % (0, 7085, "mi-01", 0, "0000:05:00.0", "AMD Instinct MI300X"),
        RCCL_DEVICE % (1, 7086, "mi-01", 1, "0000:25:00.0", "AMD Instinct MI300X"),
        # The RCCL block NCCL_DEBUG=VERSION prints (as in ROCm/rocm-systems#3415).
        "RCCL version : 2.22.3-develop:448c4c7",
        "HIP version  : 6.2.41133-dd7f95766",
        "#",
        *RCCL_IN_PLACE_HEADER,
        RCCL_ROW % (4294967296, 1073741824, "float", "sum", "%6i" % -1, "%7.0f" % 23893, 179.76, 314.58, 0),
        RCCL_ROW % (8589934592, 2147483648, "float", "sum", "%6i" % -1, "%7.0f" % 47584, 180.52, 315.91, 0),
        "# Testing 2 cycle.",
        RCCL_ROW % (4294967296, 1073741824, "float", "sum", "%6i" % -1, "%7.0f" % 23970, 179.18, 313.57, 0),
        RCCL_ROW % (8589934592, 2147483648, "float", "sum", "%6i" % -1, "%7.0f" % 61280, 140.18, 245.31, 1048576),
        "# Errors with asterisks indicate errors that have exceeded the maximum threshold.",
        "# Out of bounds values : 1 FAILED",
        "# Avg bus bandwidth    : 297.343 ",
        "#",
    ]
    return "\n".join(lines) + "\n"


def test_rccl_in_place_only_table_over_two_cycles():
    report = parse(rccl_in_place_report())
    assert (report.tool, report.tests_version, report.library_version) == ("rccl-tests", "develop:448c4c7", "2.22.3")
    assert [(rank.rank, rank.host, rank.bus_id, rank.name) for rank in report.ranks] == [
        (0, "mi-01", "0000:05:00.0", "AMD Instinct MI300X"), (1, "mi-01", "0000:25:00.0", "AMD Instinct MI300X")]
    assert [row.size_bytes for row in report.rows] == [4 * GIB, 8 * GIB, 4 * GIB, 8 * GIB]
    assert all(row.out_of_place is None for row in report.rows)
    assert row_at(report, 8 * GIB).in_place.busbw == 315.91  # the first cycle's row
    assert busbw_at(report, 8 * GIB) == 245.31  # the slowest of every cycle
    # %5g printed 1048576 as 1.04858e+06: above six digits rccl-tests' count is approximate.
    assert wrong_values(report) == 1048580
    assert (report.out_of_bounds, report.out_of_bounds_ok, report.finished) == (1, False, True)


# nccl-tests formats (notes A1): 2.13's device line printed the bus number alone, getFloatStr falls
# back to exponent form when a figure outgrows its column, and NCCL may announce itself mid-report.
NCCL_2_13_DEVICE = "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s"
NCCL_ROW = "%12li  %12li  %8s  %6s  %6i" + "  %7s  %6s  %6s  %6s" * 2


def test_nccl_2_13_device_lines_exponent_figures_and_an_announced_library():
    real = capture("01_nccl_allreduce_h100_2node_16gpu.txt").splitlines()
    table_header = real[real.index("#  Rank 15 Group  0 Pid   6740 on ztan-mig-gq73 device  7 [0000:8c:00] NVIDIA H100 "
                                   "80GB HBM3") + 1:][:4]
    text = "\n".join([
        "# nThread 1 nGpus 1 minBytes 8589934592 maxBytes 8589934592 step: 1048576(bytes) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 0 graph: 0",
        "#",
        "# Using devices",
        NCCL_2_13_DEVICE % (0, 0, 4242, "gpu-01", 0, 0x1B, "NVIDIA A100-SXM4-80GB"),
        "gpu-01:4242:4242 [0] NCCL INFO NCCL version 2.20.3+cuda12.3",
        *table_header,
        NCCL_ROW % (8589934592, 2147483648, "float", "sum", -1, "1.2e+08", "0.07", "0.07", "N/A",
                    "1.1e+08", "0.08", "0.08", "N/A"),
    ]) + "\n"
    report = parse(text)
    assert (report.tool, report.tests_version, report.library_version) == ("nccl-tests", None, "2.20.3")
    assert (report.ranks[0].bus_id, report.ranks[0].name) == ("0x1b", "NVIDIA A100-SXM4-80GB")
    row = row_at(report, 8 * GIB)
    assert (row.out_of_place.time_us, row.in_place.time_us, row.out_of_place.wrong) == (1.2e8, 1.1e8, None)
    assert busbw_at(report, 8 * GIB) == 0.07
    assert not report.finished
