"""Simulated rccl-tests against real MI300X/MI355X reports, RCCL's warnings, and the model on AMD hosts.

The lab's ROCm 6.4 build prints as the real captures 04 and 07; its ROCm 7.0 build is merged with nccl-tests
2.17 and prints nccl-tests' report under its own name, with RCCL's version block.
"""

import json
import re

import pytest

from k3ops_lab.sim import nccl_tests
from k3ops_lab.sim.host import AMDGPU_MODULE_VERSION, HARDWARE_DOCUMENT, PACKAGE_VERSIONS, ROCM_VERSION_FILE

from ...conftest import REAL_FIXTURES
from ..fake_host import bare_host, freeze_clock, run, write
from .test_sim_nccl_tests import (
    ACROSS_HOSTS_ALLTOALL, ANY_ROW, DEVICE, NTHREAD, TARGET, V218_SOCKET, busbw, change_nics, library_lines, mpirun,
    real_report, rows, token_ends, views_of,
)

MI300X_1NODE = "nccl-tests/04_rccl_allreduce_mi300x_1node_8gpu.txt"
MI355X_1NODE = "nccl-tests/07_rccl_allreduce_alltoall_mi355x_1node_8gpu_oci.txt"
RCCL_TESTS_VERSION = re.compile(r"^rccl-tests: Version \S+$")
# What AMD holds MI355X hosts to (system-acceptance-docs): in-place busbw at 8 GB above 350 GB/s, one node or two.
MI355X_ALL_REDUCE = 350.0
# ROCm release: (its rocm version file, amdgpu, RCCL, the rccl-tests build), as vendor_repo's packages leave them
RELEASES = {"6.4.1": ("6.4.1-83", "6.12.12", "2.22.3", "rocm-6.4.1"),
            "7.0.2": ("7.0.2-56", "6.14.14", "2.26.6", "2.17.9-rocm-7.0.2")}
CAPTURE_BUILD = "6.4.1"  # the lab's rccl-tests build that prints as captures 04 and 07
IOMMU_WARNING = 'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!'
WARN_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (\S+):(\d+):(\d+) \[0\] (/\S+/init\.cc):(\d+) "
                       r"NCCL WARN (.+)$")


def real_runs(relative):
    """The program output of each run in a capture, in order (a capture may hold several)."""
    runs = []
    for line in (REAL_FIXTURES / relative).read_text().splitlines():
        if line.startswith("# Collective test starting:") or (line.startswith("# nThread") and not runs):
            runs.append([])
        if runs and line.startswith(("#", " ", "rccl-tests:")) and not line.startswith(" #"):
            runs[-1].append(line)
    return runs


DEPLOYED_COMMAND_LINE = "BOOT_IMAGE=/boot/vmlinuz ro iommu=pt pci=realloc=off"


def amd_host(root, name="mi-01", release="7.0.2", command_line=DEPLOYED_COMMAND_LINE, numa_balancing="0",
             faults=None):
    """An mi355x8 host after the deploy: `release`'s ROCm, amdgpu, RCCL and rccl-tests, the boot's tunables."""
    host, _ = bare_host(root / name, "mi355x8", hostname=name, faults=faults)
    rocm, amdgpu, rccl, tests = RELEASES[release]
    files = {ROCM_VERSION_FILE: rocm, AMDGPU_MODULE_VERSION: amdgpu, f"{PACKAGE_VERSIONS}/rccl": rccl,
             f"{PACKAGE_VERSIONS}/rccl-tests": tests, nccl_tests.RCCL_LIBRARY: "simulated RCCL",
             nccl_tests.KERNEL_COMMAND_LINE: command_line, nccl_tests.NUMA_BALANCING: numa_balancing}
    for relative, content in files.items():
        write(root / name, relative, content + "\n")
    return host


def suite_of(host):
    return nccl_tests.suite_for("amd", host)


def report_of(hosts, collective="all_reduce", environ=None, *arguments):
    suite = suite_of(hosts[0])
    views, settings = views_of(hosts, suite, 8, environ, *arguments)
    return nccl_tests.report(views, settings, collective, suite)


@pytest.fixture
def mi355x_runs(tmp_path, capsys):
    """all_reduce_perf and alltoall_perf as capture 07 ran them: -b 512k -e 16G -f 2 -g 8."""
    host = amd_host(tmp_path, release=CAPTURE_BUILD)
    outputs = []
    for main in (nccl_tests.rccl_all_reduce_main, nccl_tests.rccl_alltoall_main):
        status, out, _ = run(main, capsys, host, "-b", "512k", "-e", "16G", "-f", "2", "-g", "8")
        assert status == 0
        outputs.append(out.splitlines())
    return outputs


def test_header_is_the_real_rccl_tests_header(mi355x_runs):
    real_all_reduce, real_alltoall = real_runs(MI355X_1NODE)
    programs = ("all_reduce_perf", "alltoall_perf")
    for lines, real, program in zip(mi355x_runs, (real_all_reduce, real_alltoall), programs):
        assert lines[0] == real[0] == f"# Collective test starting: {program}"
        assert NTHREAD.match(lines[1]).groups() == NTHREAD.match(real[1]).groups() == (
            "1", "8", "524288", "17179869184", "2", "factor", "5", "20", "1", "1", "0")
        assert lines[2] == real[2] == "#"
        assert RCCL_TESTS_VERSION.match(lines[3]) and RCCL_TESTS_VERSION.match(real[3])
        assert re.match(r"^rccl-tests: Version rocm-6\.4\.1:[0-9a-f]{7}$", lines[3])
        assert lines[4] == real[4] == "# Using devices"
    assert RCCL_TESTS_VERSION.match(real_runs(MI300X_1NODE)[0][2])


def test_device_lines_are_the_real_ones(mi355x_runs):
    lines = mi355x_runs[0]
    devices = [DEVICE.match(line) for line in lines[5:13]]
    assert [device.group(1, 4, 5, 6, 7) for device in devices] == [
        (str(index), "mi-01", str(index), bus, "AMD Instinct MI355X") for index, bus in enumerate(
            ("0000:05:00", "0000:15:00", "0000:65:00", "0000:75:00", "0000:85:00", "0000:95:00", "0000:e5:00",
             "0000:f5:00"))]
    real = [line for line in real_runs(MI355X_1NODE)[0] if line.startswith("#  Rank")]
    assert len(real) == 8 and all(DEVICE.match(line) for line in real + real_runs(MI300X_1NODE)[0][4:12])
    assert token_ends(lines[5]) == token_ends(real[0].replace("  GPU-6403", "     mi-01"))


def test_table_header_and_rows_line_up_with_the_real_reports(tmp_path, mi355x_runs):
    for lines, real in zip(mi355x_runs, real_runs(MI355X_1NODE)):
        header = lines.index("#", 6) + 1
        real_header = next(index for index, line in enumerate(real) if "out-of-place" in line)
        assert [line.rstrip() for line in lines[header:header + 3]] == [
            line.rstrip() for line in real[real_header:real_header + 3]]
    from_8_bytes, _ = report_of([amd_host(tmp_path, "mi-02", CAPTURE_BUILD)], "all_reduce", None, "-b", "8", "-e",
                                "16G", "-f", "2")
    reduce_rows = {int(row[1]): row.string for row in rows(from_8_bytes)}
    for real in [line for line in real_runs(MI300X_1NODE)[0] + real_runs(MI355X_1NODE)[0] if ANY_ROW.match(line)]:
        assert token_ends(reduce_rows[int(ANY_ROW.match(real)[1])]) == token_ends(real)
    exchange_rows = {int(row[1]): row.string for row in rows("\n".join(mi355x_runs[1]))}
    # capture 07's 8 GiB alltoall row lost a leading space in its document; its 16 GiB row is as printed
    real_16g = next(line for line in real_runs(MI355X_1NODE)[1] if line.startswith(" 17179869184"))
    assert token_ends(exchange_rows[16 << 30]) == token_ends(real_16g)
    assert ANY_ROW.match(real_16g).group(3, 4, 5, 13) == ANY_ROW.match(exchange_rows[16 << 30]).group(3, 4, 5, 13) == (
        "float", "none", "-1", "N/A")


def test_footer_is_the_real_footer(mi355x_runs):
    for lines, real, program in zip(mi355x_runs, real_runs(MI355X_1NODE), ("all_reduce_perf", "alltoall_perf")):
        footer = lines.index("# Errors with asterisks indicate errors that have exceeded the maximum threshold.")
        real_footer = next(index for index, line in enumerate(real) if line.startswith("# Out of bounds"))
        assert lines[footer + 1] == real[real_footer] == "# Out of bounds values : 0 OK"
        assert re.match(r"^# Avg bus bandwidth    : [\d.]+ $", lines[footer + 2])
        assert re.match(r"^# Avg bus bandwidth    : [\d.]+ $", real[real_footer + 1])
        assert lines[footer + 3:] == real[real_footer + 2:real_footer + 4] + [""] == [
            "#", f"# Collective test concluded: {program}", ""]


def test_mi355x_numbers_are_capture_07s(mi355x_runs):
    """The xGMI figure is calibrated on the real MI355X run: 406.76 all_reduce, 360.71 alltoall at 8 GiB."""
    (reduce_8g,) = [row for row in rows("\n".join(mi355x_runs[0])) if row[1] == str(8 << 30)]
    (exchange_8g,) = [row for row in rows("\n".join(mi355x_runs[1])) if row[1] == str(8 << 30)]
    assert float(reduce_8g[8]) == pytest.approx(406.76, abs=0.5)
    assert int(reduce_8g[6]) == pytest.approx(36956, rel=0.001)  # the capture's time, in us
    assert float(exchange_8g[8]) == pytest.approx(360.71, abs=0.5) and exchange_8g[2] == "268435456"


def test_a_healthy_mi355x_host_passes_and_one_without_a_gpu_does_not_run(tmp_path, capsys):
    host = amd_host(tmp_path)
    assert busbw([host], "all_reduce", suite_of(host)) >= MI355X_ALL_REDUCE
    host = amd_host(tmp_path, "mi-02")
    hardware = json.loads(host.path(HARDWARE_DOCUMENT).read_text())
    hardware["gpus"][2]["fallen_off_bus"] = True
    host.path(HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    status, out, err = run(nccl_tests.rccl_all_reduce_main, capsys, host, "-g", "8")
    assert (status, out) == (3, "")  # main() counts the GPUs before the header
    assert err == "[ERROR] The number of requested GPUs (8) is greater than the number of GPUs available (7)\n"


def test_failures_as_rccl_tests_prints_them(tmp_path, capsys):
    host = amd_host(tmp_path)
    host.path(nccl_tests.RCCL_LIBRARY).unlink()
    status, _, err = run(nccl_tests.rccl_alltoall_main, capsys, host, "-g", "8")
    assert status == 127 and err == ("alltoall_perf: error while loading shared libraries: librccl.so.1: "
                                     "cannot open shared object file: No such file or directory\n")
    host = amd_host(tmp_path, "mi-02")
    host.path(AMDGPU_MODULE_VERSION).unlink()
    status, out, _ = run(nccl_tests.rccl_all_reduce_main, capsys, host, "-g", "8")
    assert (status, out) == (2, "mi-02: Test CUDA failure common.cpp:1147 'no ROCm-capable device is detected'\n")


def test_under_mpirun_two_processes_on_one_host_ask_for_twice_the_gpus(tmp_path):
    settings = nccl_tests.parse(["-g", "8"], nccl_tests.RcclTests())
    host = amd_host(tmp_path)
    view = nccl_tests.rank_view(host, suite_of(host), settings, {}, local_size=2)
    assert view.failure.stderr == ("[ERROR] The number of requested GPUs (16) is greater than the number of GPUs "
                                   "available (8) on node (mi-01)",)


# --- across hosts ---------------------------------------------------------------------------------

def test_a_healthy_mi355x_pair_passes(tmp_path):
    pair = [amd_host(tmp_path, "mi-01"), amd_host(tmp_path, "mi-02")]
    assert busbw(pair, "all_reduce", suite_of(pair[0])) >= MI355X_ALL_REDUCE  # GPUDirect RDMA needs no module
    assert busbw(pair, "alltoall", suite_of(pair[0])) >= ACROSS_HOSTS_ALLTOALL


AMD_FAULTS = {
    "a port down": ({2: {"port_state": "Down"}}, None),
    "a port at 200 Gb/s": ({5: {"rate_gbps": 200}}, None),
    "half the throughput": ({}, {"nic_throughput_share": 0.5}),
    "no port up": ({index: {"port_state": "Down"} for index in range(8)}, None),
}


@pytest.mark.parametrize("fault", AMD_FAULTS)
def test_a_fault_on_one_mi355x_host_fails_the_pair(tmp_path, fault):
    nics, faults = AMD_FAULTS[fault]
    pair = [amd_host(tmp_path, "mi-01"), change_nics(amd_host(tmp_path, "mi-02", faults=faults), nics)]
    assert busbw(pair, "all_reduce", suite_of(pair[0])) < MI355X_ALL_REDUCE
    assert busbw(pair, "alltoall", suite_of(pair[0])) < ACROSS_HOSTS_ALLTOALL


def test_an_mi355x_pair_lists_both_hosts_ranks(tmp_path, capsys, monkeypatch):
    pair = [amd_host(tmp_path, "mi-01"), amd_host(tmp_path, "mi-02")]
    assert mpirun(monkeypatch, "alltoall", "amd", pair, "-b", TARGET, "-e", TARGET, "-g", "8") == [0, 0]
    out = capsys.readouterr().out
    assert [DEVICE.match(line).group(1, 4) for line in out.splitlines() if DEVICE.match(line)] == [
        (str(rank), "mi-01" if rank < 8 else "mi-02") for rank in range(16)]
    (row,) = rows(out)
    assert row.group(2, 4) == ("134217728", "none")


# --- RCCL's warnings ------------------------------------------------------------------------------

def warn_lines(text):
    return [line for line in library_lines(text) if " NCCL WARN " in line]


def test_without_iommu_pt_rccl_warns_on_every_rank(tmp_path, monkeypatch):
    freeze_clock(monkeypatch)
    pair = [amd_host(tmp_path, "mi-01", command_line="BOOT_IMAGE=/boot/vmlinuz ro"),
            amd_host(tmp_path, "mi-02", command_line="BOOT_IMAGE=/boot/vmlinuz ro")]
    text, status = report_of(pair, "all_reduce", {"NCCL_DEBUG": "WARN"})
    lines = library_lines(text)
    warned = [index for index, line in enumerate(lines) if "NCCL WARN" in line]
    assert status == 0 and [lines[index - 1] for index in warned] == ["", ""]  # each WARN starts with a newline
    assert [WARN_LINE.match(lines[index]).groups() for index in warned] == [
        ("2026-07-03 22:11:09", host, pid, pid, nccl_tests.RCCL_INIT_SOURCE, "163", IOMMU_WARNING)
        for host, pid in (("mi-01", "4200"), ("mi-02", "4201"))]


def test_rccl_before_2_26_does_not_stamp_its_warnings(tmp_path):
    host = amd_host(tmp_path, release="6.4.1", command_line="ro")
    (warning,) = warn_lines(report_of([host], "all_reduce", {"NCCL_DEBUG": "WARN"})[0])
    assert warning.startswith("mi-01:4200:4200 [0] /") and warning.endswith(f"NCCL WARN {IOMMU_WARNING}")


def test_rccl_warns_of_numa_balancing_too(tmp_path):
    host = amd_host(tmp_path, numa_balancing="1")
    (warning,) = warn_lines(report_of([host], "all_reduce", {"NCCL_DEBUG": "INFO"})[0])
    assert WARN_LINE.match(warning)[7] == ('NUMA auto balancing enabled which can lead to variability in the RCCL '
                                           'performance! Disable by "sudo sysctl kernel.numa_balancing=0"')


def test_without_nccl_debug_the_warning_still_ends_the_report(tmp_path):
    """rccl-tests prints ncclGetLastError() last, and RCCL records every WARN, logged or not."""
    text, _ = report_of([amd_host(tmp_path, release=CAPTURE_BUILD, command_line="ro")])
    assert library_lines(text) == [] and text.splitlines()[-1] == IOMMU_WARNING
    healthy, _ = report_of([amd_host(tmp_path, "mi-02", release=CAPTURE_BUILD)])
    assert healthy.endswith("# Collective test concluded: all_reduce_perf\n\n")
    merged, _ = report_of([amd_host(tmp_path, "mi-03", command_line="ro")])  # nccl-tests' writeErrors()
    assert merged.splitlines()[-1] == f"# error: {IOMMU_WARNING}"


# --- the ROCm 7 build: nccl-tests 2.17's report under rccl-tests' name ------------------------------

def test_the_merged_build_prints_nccl_tests_report_under_its_own_name(tmp_path):
    text, status = report_of([amd_host(tmp_path)], "all_reduce", None, "-b", "1K", "-e", TARGET, "-f", "2")
    lines, real = text.splitlines(), real_report(V218_SOCKET)
    assert status == 0 and re.match(
        r"^# rccl-tests version 2\.17\.9-rocm-7\.0\.2:[0-9a-f]{7} rccl-headers=22606 rccl-library=22606$", lines[0])
    assert lines[1:5] == ["# Collective test starting: all_reduce_perf", lines[2], "#", "# Using devices"]
    assert NTHREAD.match(lines[2])[7] == "1"  # nccl-tests' default warmup
    table, real_table = lines.index("#", 13), real.index("#", 6)
    assert [line.rstrip() for line in lines[table:table + 4]] == [
        line.rstrip() for line in real[real_table:real_table + 4]]
    real_rows = {int(ANY_ROW.match(line)[1]): line for line in real if ANY_ROW.match(line)}
    for row in rows(text):
        if int(row[1]) in real_rows:
            assert token_ends(row.string) == token_ends(real_rows[int(row[1])])
    assert lines[-5:] == ["# Out of bounds values : 0 OK", lines[-4], "#",
                          "# Collective test concluded: all_reduce_perf", ""]


def test_from_nccl_debug_version_rank_zero_prints_rccls_version_block(tmp_path):
    pair = [amd_host(tmp_path, "mi-01"), amd_host(tmp_path, "mi-02")]
    block = library_lines(report_of(pair, "all_reduce", {"NCCL_DEBUG": "VERSION"})[0])
    assert [line.split(" : ")[0] for line in block] == [
        "RCCL version", "HIP version ", "ROCm version", "Hostname    ", "Librccl path"]
    assert re.match(r"^RCCL version : 2\.26\.6-[0-9a-f]{7}$", block[0])
    assert re.match(r"^ROCm version : 7\.0\.2\.0-56-[0-9a-f]{7}$", block[2])
    assert block[3:] == ["Hostname     : mi-01", "Librccl path : /opt/rocm/lib/librccl.so.1"]
