"""Simulated nccl-tests (all_reduce_perf, alltoall_perf) against real reports, and the bandwidth model.

The format tests hold the simulator to real captures: header lines, columns (by where each token ends) and
footer. The model tests build each rank's view of its host, healthy or with one fault, and judge the report
as the fabric check does: the lower of out-of-place and in-place busbw at 8 GiB against a threshold.
"""

import json
import pickle
import re
import sys
import threading
import types

import pytest

from k3ops_lab.sim import infiniband, nccl_tests
from k3ops_lab.sim.host import HARDWARE_DOCUMENT

from ...conftest import REAL_FIXTURES
from ..fake_host import nvidia_host, run, write

V218_SOCKET = "nccl-tests/08_nccl_allreduce_v2.18_format_socket_2rank_tagged.txt"
H100_2NODE = "nccl-tests/01_nccl_allreduce_h100_2node_16gpu.txt"
# Parsers written against the real reports.
NTHREAD = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
                     r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)$")
DEVICE = re.compile(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[([0-9a-f]{4}:[0-9a-f]{2}:"
                    r"[0-9a-f]{2})\] (.+)$")
ROW = re.compile(r"^ +(\d+) +(\d+) +float +sum +-1 +(\S+) +(\S+) +(\S+) +(\d+) +(\S+) +(\S+) +(\S+) +(\d+)$")
# Any collective's row: size, count, type, redop, root, then time algbw busbw #wrong twice.
ANY_ROW = re.compile(r"^ +(\d+) +(\d+) +(\S+) +(\S+) +(-?\d+)" + r" +(\S+) +(\S+) +(\S+) +(\S+)" * 2 + "$")
AVERAGE = re.compile(r"^# Avg bus bandwidth    : (\S+) $")
TARGET = "8G"  # the fabric check judges busbw at 8 GiB
# What a healthy lab must pass and every fault must fail (GB/s busbw at 8 GiB).
SINGLE_HOST_ALL_REDUCE = {"h200x8": 431.0, "b300x8": 800.0, "gb300x4": 600.0}
ACROSS_HOSTS_ALL_REDUCE = 340.0
ACROSS_HOSTS_ALLTOALL = 40.0
NVLINK_DOMAIN_ALL_REDUCE = 750.0
NVIDIA = nccl_tests.NcclTests()


def real_report(relative):
    """A report's program output: below the fixture's provenance lines, without mpirun's tags."""
    text = (REAL_FIXTURES / relative).read_text()
    return [re.sub(r"^\[1,\d\]<stdout>:", "", line) for line in text.splitlines()
            if line.startswith(("#", " ", "[1,0]<stdout>:")) and not line.startswith(("# SOURCE", "# WHAT", "# NOTE",
                                                                                     "# WHY", "# ----"))]


def lab_host(root, name="gpu-01", profile="h200x8", faults=None, gpudirect_rdma=True):
    """An NVIDIA lab host after the deploy: driver, NCCL, and nvidia-peermem live unless `gpudirect_rdma` is off."""
    host, _ = nvidia_host(root / name, profile=profile, hostname=name, faults=faults)
    if gpudirect_rdma:
        write(root / name, nccl_tests.PEERMEM_INITSTATE, "live\n")
    return host


def change_nics(host, changes):
    """Edit the host's hardware document: {NIC index: {field: value}}, as a fault in the machine would."""
    hardware = json.loads(host.path(HARDWARE_DOCUMENT).read_text())
    for index, fields in changes.items():
        hardware["nics"][index].update(fields)
    host.path(HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    return host


def settings_for(suite, gpus, *arguments):
    return nccl_tests.parse(["-b", TARGET, "-e", TARGET, "-g", str(gpus), *arguments], suite)


def views_of(hosts, suite, gpus, environ=None, *arguments):
    """Each host's rank view, one rank per host, as mpirun --host a:1,b:1 starts them."""
    settings = settings_for(suite, gpus, *arguments)
    return [nccl_tests.rank_view(host, suite, settings, environ or {}, rank=rank, pid=4200 + rank)
            for rank, host in enumerate(hosts)], settings


def rows(text):
    return [ANY_ROW.match(line) for line in text.splitlines() if ANY_ROW.match(line)]


def busbw(hosts, collective, suite=NVIDIA, gpus=8, environ=None):
    """The lower of out-of-place and in-place busbw at 8 GiB, as the fabric check judges it."""
    views, settings = views_of(hosts, suite, gpus, environ)
    text, status = nccl_tests.report(views, settings, collective, suite)
    assert status == 0, text
    (row,) = rows(text)
    return min(float(row[8]), float(row[12]))


def token_ends(line):
    return [match.end() for match in re.finditer(r"\S+", line)]


@pytest.fixture
def h200_report(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path)
    status, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert status == 0
    return out.splitlines(), hardware


def test_header_is_the_real_nccl_tests_header(h200_report):
    lines, hardware = h200_report
    real = real_report(V218_SOCKET)
    assert lines[0] == "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807"
    assert re.match(r"^# nccl-tests version \S+ nccl-headers=\d+ nccl-library=\d+$", real[0])
    assert lines[1] == real[1].replace("all_reduce_perf_mpi", "all_reduce_perf")
    assert NTHREAD.match(lines[2]).groups() == ("1", "8", "8", "8589934592", "2", "factor", "1", "20", "1", "1", "0")
    assert NTHREAD.match(real[2])
    assert lines[3:5] == real[3:5] == ["#", "# Using devices"]
    devices = [DEVICE.match(line).groups() for line in lines[5:13]]
    assert [(rank, device, pci, name) for rank, _, _, _, device, pci, name in devices] == [
        (str(i), str(i), gpu["pci_bus_id"][:10].lower().replace(".", ""), "NVIDIA H200")
        for i, gpu in enumerate(hardware["gpus"])]
    assert {(group, pid, host) for _, group, pid, host, *_ in devices} == {("0", devices[0][2], "gpu-01")}
    assert DEVICE.match(real[5]) and DEVICE.match(real_report(H100_2NODE)[4])


def test_table_columns_line_up_with_the_real_report(h200_report):
    lines, _ = h200_report
    real = real_report(V218_SOCKET)
    table = lines.index("#", 6)
    real_table = real.index("#", 6)
    assert [line.rstrip() for line in lines[table:table + 4]] == \
        [line.rstrip() for line in real[real_table:real_table + 4]]
    real_rows = [line for line in real if ROW.match(line)]
    sim_rows = {int(ROW.match(line)[1]): line for line in lines if ROW.match(line)}
    for real_row in real_rows:
        size = int(ROW.match(real_row)[1])
        assert token_ends(sim_rows[size]) == token_ends(real_row)
    assert list(sim_rows) == [8 << shift for shift in range(31)]


def test_footer_and_average(h200_report):
    lines, _ = h200_report
    real = real_report(V218_SOCKET)
    footer = next(i for i, line in enumerate(lines) if line.startswith("# Out of bounds"))
    assert lines[footer] == real[next(i for i, line in enumerate(real) if line.startswith("# Out of bounds"))]
    assert AVERAGE.match(lines[footer + 1]) and AVERAGE.match(real[-5])
    assert lines[footer + 2:] == ["#", "# Collective test concluded: all_reduce_perf", ""]
    busbw = [float(value) for line in lines if ROW.match(line) for value in ROW.match(line).group(5, 9)]
    assert float(AVERAGE.match(lines[footer + 1])[1]) == pytest.approx(sum(busbw) / len(busbw), rel=1e-3)


def test_bandwidth_follows_the_nvswitch_fabric(h200_report):
    lines, _ = h200_report
    rows = {int(ROW.match(line)[1]): ROW.match(line) for line in lines if ROW.match(line)}
    busbw = [float(rows[size][5]) for size in sorted(rows)]
    assert busbw == sorted(busbw)
    assert 470 < busbw[-1] < 480  # 18 NVLinks x 26.562 GB/s
    assert busbw[0] < 1 and 5 < float(rows[8][3]) < 20  # small messages are latency-bound, ~10 us
    # busbw = algbw * 2(n-1)/n
    assert float(rows[1 << 30][4]) == pytest.approx(float(rows[1 << 30][5]) * 8 / 14, rel=0.01)


def test_down_nvlinks_degrade_the_whole_ring(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, faults={"nvlink_down_links": {"5": list(range(9))}})
    _, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-b", "8G", "-e", "8G", "-g", "8")
    row = next(ROW.match(line) for line in out.splitlines() if ROW.match(line))
    assert 235 < float(row[5]) < 240  # half the links of one GPU: half the bus bandwidth


def test_b300_gb300_use_their_links(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-b", "1G", "-e", "1G", "-g", "4")
    row = next(ROW.match(line) for line in out.splitlines() if ROW.match(line))
    assert 900 < float(row[5]) < 957 and "[0008:06:00] NVIDIA GB300" in out


def test_failures_as_nccl_tests_prints_them(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path / "a", nccl=None)
    status, _, err = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-g", "8")
    assert status == 127 and err == ("all_reduce_perf: error while loading shared libraries: libnccl.so.2: "
                                     "cannot open shared object file: No such file or directory\n")
    host, _ = nvidia_host(tmp_path / "b", module=None)
    status, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-g", "8")
    assert status == 2
    assert out.splitlines()[-2] == "gpu-01: Test CUDA failure util.cu:553 'no CUDA-capable device is detected'"
    assert re.match(r"^ \.\. gpu-01 pid \d+: Test failure common\.cu:1100$", out.splitlines()[-1])
    host, _ = nvidia_host(tmp_path / "c")
    status, out, err = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-g", "16")
    assert status == 5 and err == ("Invalid number of GPUs: 16 requested but only 8 were found.\n"
                                   "Please check the number of processes and GPUs per process.\n")


# --- options ---------------------------------------------------------------------------------------

def test_datatype_sets_the_type_column_and_the_count(tmp_path):
    views, settings = views_of([lab_host(tmp_path)], NVIDIA, 8, None, "-d", "bfloat16", "-T", "30")
    text, _ = nccl_tests.report(views, settings, "all_reduce", NVIDIA)
    (row,) = rows(text)
    assert row.group(1, 2, 3) == ("8589934592", "4294967296", "bfloat16")


def test_options_it_does_not_simulate_are_refused():
    with pytest.raises(ValueError, match="option not simulated"):
        nccl_tests.parse(["-o", "max"], NVIDIA)
    with pytest.raises(ValueError, match="datatype not simulated"):
        nccl_tests.parse(["-d", "all"], NVIDIA)


# --- one host -------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", SINGLE_HOST_ALL_REDUCE)
def test_a_healthy_host_passes_its_all_reduce_threshold(tmp_path, profile):
    gpus = 4 if profile == "gb300x4" else 8
    assert busbw([lab_host(tmp_path, profile=profile)], "all_reduce", gpus=gpus) >= SINGLE_HOST_ALL_REDUCE[profile]


def test_nvlinks_down_on_one_gpu_fail_the_host(tmp_path):
    host = lab_host(tmp_path, faults={"nvlink_down_links": {"3": [0, 1]}})
    assert busbw([host], "all_reduce") < SINGLE_HOST_ALL_REDUCE["h200x8"]  # 16 of 18 links: 425 GB/s


def test_one_nvlink_down_costs_its_share_of_the_ring(tmp_path):
    """One link of 18 is 5.6% of the ring: 451 GB/s, above the 431 a real H200 host is held to."""
    host = lab_host(tmp_path, faults={"nvlink_down_links": {"3": [0]}})
    assert busbw([host], "all_reduce") == pytest.approx(478 * 17 / 18, rel=0.01)


def test_a_gpu_off_the_bus_leaves_too_few_gpus(tmp_path, capsys):
    host = lab_host(tmp_path)
    hardware = json.loads(host.path(HARDWARE_DOCUMENT).read_text())
    hardware["gpus"][5]["fallen_off_bus"] = True
    host.path(HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    status, out, err = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-g", "8")
    assert status == 5 and err.startswith("Invalid number of GPUs: 8 requested but only 7 were found.\n")
    assert "Test failure common.cu:1100" in out.splitlines()[-1]


def test_alltoall_prints_per_peer_counts_no_redop_and_no_in_place_check(tmp_path, capsys):
    status, out, _ = run(nccl_tests.nccl_alltoall_main, capsys, lab_host(tmp_path), "-b", "1K", "-e", TARGET, "-f",
                         "2", "-g", "8")
    assert status == 0 and out.splitlines()[1] == "# Collective test starting: alltoall_perf"
    found = {int(row[1]): row for row in rows(out)}
    assert found[8 << 30].group(2, 3, 4, 5, 9, 13) == ("268435456", "float", "none", "-1", "0", "N/A")
    # busbw = algbw x (n-1)/n (doc/PERFORMANCE.md)
    assert float(found[8 << 30][8]) == pytest.approx(float(found[8 << 30][7]) * 7 / 8, rel=0.005)


def test_alltoall_rows_line_up_with_all_reduce_rows(tmp_path, capsys):
    """writeBenchmarkLineBody: "  %6g" for #wrong, "    N/A" (one column shorter) where it is not checked."""
    _, all_reduce, _ = run(nccl_tests.nccl_all_reduce_main, capsys, lab_host(tmp_path / "a"), "-b", TARGET, "-e",
                           TARGET, "-g", "8")
    _, alltoall, _ = run(nccl_tests.nccl_alltoall_main, capsys, lab_host(tmp_path / "b"), "-b", TARGET, "-e",
                         TARGET, "-g", "8")
    reduce_ends, exchange_ends = (token_ends(rows(text)[0].string) for text in (all_reduce, alltoall))
    assert exchange_ends[:-1] == reduce_ends[:-1] and exchange_ends[-1] == reduce_ends[-1] - 1


# --- across hosts ---------------------------------------------------------------------------------

def test_two_hosts_list_every_rank_with_its_host_as_mpi_runs_print_them(tmp_path):
    views, settings = views_of([lab_host(tmp_path, "gpu-01"), lab_host(tmp_path, "gpu-02")], NVIDIA, 8)
    text, status = nccl_tests.report(views, settings, "all_reduce", NVIDIA)
    devices = [DEVICE.match(line).groups() for line in text.splitlines() if DEVICE.match(line)]
    assert status == 0 and [int(rank) for rank, *_ in devices] == list(range(16))
    assert [(host, pid, device) for _, _, pid, host, device, _, _ in devices] == [
        (host, str(pid), str(device)) for host, pid in (("gpu-01", 4200), ("gpu-02", 4201)) for device in range(8)]
    real = [line for line in real_report(H100_2NODE) if DEVICE.match(line)]
    assert len(real) == 16 and DEVICE.match(real[8])[4] != DEVICE.match(real[0])[4]  # the same shape in a real run
    assert text.splitlines()[0].startswith("# nccl-tests version ")  # rank 0 alone prints one header


def test_a_healthy_pair_passes_all_reduce_and_alltoall(tmp_path):
    hosts = [lab_host(tmp_path, "gpu-01"), lab_host(tmp_path, "gpu-02")]
    assert busbw(hosts, "all_reduce") == pytest.approx(380, rel=0.01)  # 8 x 400 Gb/s / 8 x 0.95
    assert busbw(hosts, "all_reduce") >= ACROSS_HOSTS_ALL_REDUCE
    assert busbw(hosts, "alltoall") == pytest.approx(47.5, rel=0.01)  # one NIC's figure
    assert busbw(hosts, "alltoall") >= ACROSS_HOSTS_ALLTOALL


NIC_FAULTS = {
    "a port down": dict(nics={2: {"port_state": "Down"}}),
    "a port at 200 Gb/s": dict(nics={5: {"rate_gbps": 200}}),
    "no GPUDirect RDMA": dict(gpudirect_rdma=False),
    "half the throughput": dict(faults={"nic_throughput_share": 0.5}),
    "no port up": dict(nics={index: {"port_state": "Down"} for index in range(8)}),
}


def faulty_host(tmp_path, fault, name="gpu-02", profile="h200x8"):
    change = NIC_FAULTS[fault]
    host = lab_host(tmp_path, name, profile=profile, faults=change.get("faults"),
                    gpudirect_rdma=change.get("gpudirect_rdma", True))
    return change_nics(host, change.get("nics", {}))


@pytest.mark.parametrize("fault", NIC_FAULTS)
def test_a_fault_on_one_host_fails_all_reduce_across_hosts(tmp_path, fault):
    hosts = [lab_host(tmp_path, "gpu-01"), faulty_host(tmp_path, fault)]
    assert busbw(hosts, "all_reduce") < ACROSS_HOSTS_ALL_REDUCE


@pytest.mark.parametrize("fault", NIC_FAULTS)
def test_a_fault_on_one_host_fails_alltoall_across_hosts(tmp_path, fault):
    hosts = [lab_host(tmp_path, "gpu-01"), faulty_host(tmp_path, fault)]
    assert busbw(hosts, "alltoall") < ACROSS_HOSTS_ALLTOALL


def test_the_slowest_host_sets_the_pace(tmp_path):
    hosts = [lab_host(tmp_path, "gpu-01"), faulty_host(tmp_path, "no GPUDirect RDMA")]
    assert busbw(hosts, "all_reduce") == pytest.approx(380 * 0.65, rel=0.01)  # NCCL stages through host memory
    assert busbw(list(reversed(hosts)), "all_reduce") == busbw(hosts, "all_reduce")


def test_a_slow_port_shows_in_ibstat_and_a_throughput_fault_does_not(tmp_path, capsys):
    slow, share = faulty_host(tmp_path, "a port at 200 Gb/s"), faulty_host(tmp_path, "half the throughput", "gpu-03")
    _, slow_port, _ = run(infiniband.ibstat_main, capsys, slow, "mlx5_5")
    assert "\t\tRate: 200\n" in slow_port
    _, healthy_looking, _ = run(infiniband.ibstat_main, capsys, share)
    assert healthy_looking.count("State: Active") == 8 and healthy_looking.count("Rate: 400") == 8


# --- NIC loopback: one host, P2P and SHM disabled (Azure NHC's "IB loopback") ---------------------

LOOPBACK = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
LOOPBACK_THRESHOLD = 36.0  # GB/s at 8 GiB: under one 400G NIC's 47.5, over what any NIC fault leaves


@pytest.mark.parametrize("collective", ["all_reduce", "alltoall"])
def test_nic_loopback_runs_at_one_nics_figure(tmp_path, collective):
    host = lab_host(tmp_path)
    assert busbw([host], collective, environ=LOOPBACK) == pytest.approx(47.5, rel=0.01)  # 400 / 8 x 0.95
    assert busbw([host], collective, environ=LOOPBACK) > LOOPBACK_THRESHOLD


@pytest.mark.parametrize("collective", ["all_reduce", "alltoall"])
@pytest.mark.parametrize("fault", NIC_FAULTS)
def test_each_nic_fault_fails_nic_loopback(tmp_path, fault, collective):
    assert busbw([faulty_host(tmp_path, fault)], collective, environ=LOOPBACK) < LOOPBACK_THRESHOLD


def test_nic_loopback_numbers_per_fault(tmp_path):
    expected = {"a port down": 23.75, "a port at 200 Gb/s": 23.75, "no GPUDirect RDMA": 47.5 * 0.65,
                "half the throughput": 23.75, "no port up": 3.0}
    found = {fault: busbw([faulty_host(tmp_path / fault.replace(" ", "_"), fault)], "all_reduce", environ=LOOPBACK)
             for fault in NIC_FAULTS}
    assert found == pytest.approx(expected, rel=0.01)


def test_nvlinks_down_do_not_show_in_nic_loopback(tmp_path):
    host = lab_host(tmp_path, faults={"nvlink_down_links": {"3": list(range(18))}})
    assert busbw([host], "all_reduce") < SINGLE_HOST_ALL_REDUCE["h200x8"]
    assert busbw([host], "all_reduce", environ=LOOPBACK) == pytest.approx(47.5, rel=0.01)


@pytest.mark.parametrize("environ", [{}, {"NCCL_P2P_DISABLE": "1"}, {"NCCL_SHM_DISABLE": "1"},
                                     {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "1"},
                                     {"NCCL_P2P_DISABLE": "yes", "NCCL_SHM_DISABLE": "1"}])
def test_nic_loopback_needs_both_switches(tmp_path, environ):
    host = lab_host(tmp_path)
    assert not nccl_tests.nic_loopback(environ)
    assert busbw([host], "all_reduce", environ=environ) == busbw([host], "all_reduce")
    assert busbw([host], "alltoall", environ=environ) == busbw([host], "alltoall")


def test_nic_loopback_through_main(tmp_path, capsys, monkeypatch):
    for name, value in LOOPBACK.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    status, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, lab_host(tmp_path), "-b", TARGET, "-e", TARGET,
                         "-g", "8")
    (row,) = rows(out)
    assert status == 0 and float(row[8]) == pytest.approx(47.5, rel=0.01)


def test_nic_loopback_over_two_hosts_changes_nothing(tmp_path):
    hosts = [lab_host(tmp_path, "gpu-01"), lab_host(tmp_path, "gpu-02")]
    assert busbw(hosts, "all_reduce", environ=LOOPBACK) == busbw(hosts, "all_reduce")


def test_rccl_nic_loopback_alike(tmp_path):
    from .test_sim_rccl_tests import AMD_FAULTS, amd_host, suite_of

    healthy = amd_host(tmp_path, "mi-01")
    suite = suite_of(healthy)
    for collective in ("all_reduce", "alltoall"):
        assert busbw([healthy], collective, suite, environ=LOOPBACK) == pytest.approx(47.5, rel=0.01)
    for fault, (nics, faults) in AMD_FAULTS.items():
        host = change_nics(amd_host(tmp_path / fault.replace(" ", "_"), "mi-02", faults=faults), nics)
        assert busbw([host], "all_reduce", suite, environ=LOOPBACK) < LOOPBACK_THRESHOLD, fault
    assert busbw([healthy], "all_reduce", suite, environ={"NCCL_P2P_DISABLE": "1"}) == pytest.approx(406.8, rel=0.01)


def test_trays_of_one_nvlink_domain_meet_over_nvlink(tmp_path):
    trays = [lab_host(tmp_path, "gpu-01", "gb300x4"), lab_host(tmp_path, "gpu-02", "gb300x4")]
    assert busbw(trays, "all_reduce", gpus=4) >= NVLINK_DOMAIN_ALL_REDUCE
    change_nics(trays[1], {0: {"port_state": "Down"}})  # its NICs carry none of it
    assert busbw(trays, "all_reduce", gpus=4) >= NVLINK_DOMAIN_ALL_REDUCE


# --- NCCL's own lines -----------------------------------------------------------------------------

def library_lines(text):
    """The lines between the device list and the table: what NCCL printed there."""
    lines = text.splitlines()
    last_device = max(index for index, line in enumerate(lines) if DEVICE.match(line))
    return lines[last_device + 1:lines.index("#", last_device + 1)]


def test_without_nccl_debug_the_library_prints_nothing(tmp_path):
    hosts = [lab_host(tmp_path, "gpu-01"), faulty_host(tmp_path, "no port up")]
    views, settings = views_of(hosts, NVIDIA, 8)
    assert library_lines(nccl_tests.report(views, settings, "all_reduce", NVIDIA)[0]) == []


def test_at_warn_rank_zero_prints_the_nccl_version(tmp_path):
    views, settings = views_of([lab_host(tmp_path, "gpu-01"), lab_host(tmp_path, "gpu-02")], NVIDIA, 8,
                               {"NCCL_DEBUG": "WARN"})
    assert library_lines(nccl_tests.report(views, settings, "all_reduce", NVIDIA)[0]) == [
        "NCCL version 2.28.7+cuda13.0"]


def test_at_info_a_host_without_an_active_port_says_it_falls_back_to_sockets(tmp_path):
    hosts = [lab_host(tmp_path, "gpu-01"), faulty_host(tmp_path, "no port up")]
    views, settings = views_of(hosts, NVIDIA, 8, {"NCCL_DEBUG": "info"})
    text, _ = nccl_tests.report(views, settings, "all_reduce", NVIDIA)
    assert library_lines(text) == [
        "gpu-01:4200:4200 [0] NCCL INFO NCCL version 2.28.7+cuda13.0",
        "gpu-02:4201:4201 [0] NCCL INFO NCCL version 2.28.7+cuda13.0",
        "gpu-02:4201:4201 [0] NCCL INFO NET/IB : No device found.",  # NCCL logs it at INFO (net_ib.cc)
        "gpu-02:4201:4201 [0] NCCL INFO Using network Socket",
    ]
    assert busbw(hosts, "all_reduce") == pytest.approx(3.0, rel=0.01)


# --- under mpirun ---------------------------------------------------------------------------------

class ThreadWorld:
    """mpi4py's COMM_WORLD for ranks run as threads of one test: the collectives the simulator uses."""

    def __init__(self, size):
        self.size, self.local = size, threading.local()
        self.slots, self.barrier = [None] * size, threading.Barrier(size, timeout=30)

    def Get_rank(self):
        return self.local.rank

    def _exchange(self, value):
        self.slots[self.local.rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values

    def allgather(self, value):
        return self._exchange(value)

    def gather(self, value, root=0):
        values = self._exchange(pickle.loads(pickle.dumps(value)))  # what crosses hosts is pickled
        return values if self.local.rank == root else None

    def bcast(self, value, root=0):
        return self._exchange(value)[root]


class Hung(Exception):
    """What the fake sleep raises once a rank has used up its sleeps: it was still blocked."""


def mpirun(monkeypatch, collective, vendor, hosts, *arguments, environ=None, sleeps=None):
    """Run the test as `mpirun --host a:1,b:1` would, one rank per host: each rank's exit status, or "hung"
    for a rank that was still sleeping at its `sleeps`-th sleep (with `sleeps`, the seconds each rank slept
    come back too)."""
    world = ThreadWorld(len(hosts))
    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=types.SimpleNamespace(COMM_WORLD=world)))
    environ = {**(environ or {}), "OMPI_COMM_WORLD_SIZE": str(len(hosts))}
    statuses, slept = {}, {index: [] for index in range(len(hosts))}

    def rank(index, host):
        world.local.rank = index

        def sleep(seconds):
            slept[index].append(seconds)
            if len(slept[index]) == sleeps:
                raise Hung

        try:
            statuses[index] = nccl_tests.main(collective, vendor, list(arguments), host, environ, sleep=sleep)
        except Hung:
            statuses[index] = "hung"

    threads = [threading.Thread(target=rank, args=(index, host)) for index, host in enumerate(hosts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcome = [statuses[index] for index in range(len(hosts))]
    return outcome if sleeps is None else (outcome, [slept[index] for index in range(len(hosts))])


def test_under_mpirun_rank_zero_prints_the_whole_report(tmp_path, capsys, monkeypatch):
    hosts = [lab_host(tmp_path, "gpu-01"), lab_host(tmp_path, "gpu-02")]
    assert mpirun(monkeypatch, "all_reduce", "nvidia", hosts, "-b", TARGET, "-e", TARGET, "-g", "8") == [0, 0]
    out = capsys.readouterr().out
    assert out.count("# nccl-tests version") == 1 and out.count("# Collective test concluded") == 1
    assert [DEVICE.match(line)[4] for line in out.splitlines() if DEVICE.match(line)] == ["gpu-01"] * 8 + ["gpu-02"] * 8
    (row,) = rows(out)
    assert float(row[8]) == pytest.approx(380, rel=0.01)


def test_under_mpirun_every_rank_exits_with_the_failing_ranks_status(tmp_path, capsys, monkeypatch):
    broken = lab_host(tmp_path, "gpu-02")
    hardware = json.loads(broken.path(HARDWARE_DOCUMENT).read_text())
    hardware["gpus"][0]["fallen_off_bus"] = True
    broken.path(HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    assert mpirun(monkeypatch, "all_reduce", "nvidia", [lab_host(tmp_path, "gpu-01"), broken], "-g", "8") == [5, 5]
    out, err = capsys.readouterr()
    assert err == ("Invalid number of GPUs: 8 requested but only 7 were found.\n"
                   "Please check the number of processes and GPUs per process.\n")
    assert re.search(r"^ \.\. gpu-02 pid \d+: Test failure common\.cu:1100$", out, re.MULTILINE)
    assert not any(DEVICE.match(line) for line in out.splitlines())  # nccl-tests stops before it lists them


def test_a_rank_view_crosses_hosts_as_a_pickle(tmp_path):
    (view,), _ = views_of([faulty_host(tmp_path, "a port down")], NVIDIA, 8, {"NCCL_DEBUG": "INFO"})
    assert pickle.loads(pickle.dumps(view)) == view


# --- a host NCCL's bootstrap cannot reach -------------------------------------------------------------

# The kernel's tables on a lab host (eth0 on the lab bridge, and lo), as /proc shows them on x86-64.
ROUTES = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
          "{docker}eth0\t0007D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
DOCKER_ROUTE = "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 10.213.7.0/24 2 0 2
        +-- 10.213.7.0/28 2 0 2
           |-- 10.213.7.0
              /24 link UNICAST
           |-- {address}
              /32 host LOCAL
        |-- 10.213.7.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
{docker}Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 10.213.7.0/24 2 0 2
           |-- {address}
              /32 host LOCAL
"""
DOCKER_TRIE = """     +-- 172.17.0.0/16 2 0 2
           |-- 172.17.0.1
              /32 host LOCAL
"""
PEER = re.compile(r"^(10\.213\.7\.\d+)<(\d+)>$")
RETRY_LINE = re.compile(r"^(\S+):(\d+):(\d+) \[(\d+)\] NCCL INFO (\w+): connect to (\S+) returned Connection "
                        r"timed out, retrying \((\d+)/34\) after sleep for (\d+) msec$")


def on_the_lab_network(host, address, docker=False):
    """The host's kernel tables: `address`/24 on eth0, and docker's bridge listed before it if asked."""
    write(host.root, nccl_tests.KERNEL_ROUTES, ROUTES.format(docker=DOCKER_ROUTE if docker else ""))
    write(host.root, nccl_tests.KERNEL_ADDRESSES, FIB_TRIE.format(address=address,
                                                                  docker=DOCKER_TRIE if docker else ""))
    return host


def lab_pair(tmp_path, unreachable, vendor_host=lab_host):
    """gpu-01 (10.213.7.11, rank 0) and gpu-02 (10.213.7.12), the one named with the fault."""
    return [on_the_lab_network(vendor_host(tmp_path, name, faults={"bootstrap_unreachable": True}
                                           if name == unreachable else None), f"10.213.7.{11 + index}")
            for index, name in enumerate(("gpu-01", "gpu-02"))]


def test_the_retry_line_is_nccl_2_28s_info_from_socket_cc():
    """socketConnectCheck at v2.28.7-1: INFO(NCCL_NET|NCCL_INIT, "%s: connect to %s returned %s, retrying
    (%d/%ld) after sleep for %u msec"), the peer as ncclSocketToString's "%s<%s>"; at INFO only."""
    assert nccl_tests.bootstrap_retry_line("2.28.7", "gpu-02", 4201, 4203, 0, "socketPollConnect",
                                           "10.213.7.11<43651>", 1) == (
        "gpu-02:4201:4203 [0] NCCL INFO socketPollConnect: connect to 10.213.7.11<43651> returned Connection "
        "timed out, retrying (1/34) after sleep for 100 msec")
    assert nccl_tests.bootstrap_retry_line("2.28.7", "gpu-01", 4200, 4201, 0, "socketStartConnect",
                                           "10.213.7.12<51003>", 34).endswith(
        "socketStartConnect: connect to 10.213.7.12<51003> returned Connection timed out, retrying (34/34) after "
        "sleep for 3400 msec")
    # NCCL 2.24 to 2.26, so RCCL 2.26.6 (ROCm 7.0): no peer in it; before 2.24 (RCCL 2.22.3) a timeout logs nothing
    assert nccl_tests.bootstrap_retry_line("2.26.6", "mi-02", 7, 9, 3, "socketPollConnect", "10.213.7.11<43651>",
                                           2) == ("mi-02:7:9 [3] NCCL INFO socketPollConnect: connect returned "
                                                  "Connection timed out, retrying (2/34) after sleep for 200 msec")
    assert nccl_tests.bootstrap_retry_line("2.22.3", "mi-02", 7, 9, 3, "socketPollConnect", "x<1>", 1) is None


def test_each_retry_waits_for_the_kernel_to_give_up_on_the_syn(tmp_path):
    host = lab_host(tmp_path)
    assert nccl_tests.connect_timeout(host) == 127.0  # tcp_syn_retries 6: 1 + 2 + 4 + ... + 64 s
    delays = nccl_tests.bootstrap_retry_delays(127.0)
    assert len(delays) == 34 and delays[:3] == [127.0, 127.1, 127.2] and delays[-1] == pytest.approx(130.3)
    write(host.root, nccl_tests.TCP_SYN_RETRIES, "3\n")
    assert nccl_tests.connect_timeout(host) == 15.0


def test_the_bootstrap_address_comes_from_the_kernel_as_nccl_picks_its_interface(tmp_path):
    host = lab_host(tmp_path)
    assert nccl_tests.bootstrap_address(host, {}) is None  # no tables: no address (and no DNS to ask)
    on_the_lab_network(host, "10.213.7.12", docker=True)
    assert nccl_tests.bootstrap_address(host, {}) == "10.213.7.12"  # docker0 comes first, NCCL passes it over
    assert nccl_tests.bootstrap_address(host, {"NCCL_SOCKET_IFNAME": "docker"}) == "172.17.0.1"
    assert nccl_tests.bootstrap_address(host, {"NCCL_SOCKET_IFNAME": "=eth0"}) == "10.213.7.12"
    assert nccl_tests.bootstrap_address(host, {"NCCL_SOCKET_IFNAME": "^eth,docker"}) is None


def test_a_view_carries_the_fault_and_the_address(tmp_path):
    views, _ = views_of(lab_pair(tmp_path, "gpu-02"), NVIDIA, 8)
    assert [(view.bootstrap_unreachable, view.bootstrap_address) for view in views] == [
        (False, "10.213.7.11"), (True, "10.213.7.12")]
    assert pickle.loads(pickle.dumps(views[1])) == views[1]


def test_who_retries_which_connection(tmp_path):
    views, _ = views_of(lab_pair(tmp_path / "a", "gpu-01"), NVIDIA, 8)
    stalls = nccl_tests.bootstrap_hang(views)  # the root's host: every rank of gpu-02 sends to it in vain
    assert [(stall.rank, stall.device, stall.thread, stall.function) for stall in stalls] == [
        (1, device, 4201 + 2 + device, "socketPollConnect") for device in range(8)]
    assert {PEER.match(stall.peer)[1] for stall in stalls} == {"10.213.7.11"} and len({s.peer for s in stalls}) == 1
    views, _ = views_of(lab_pair(tmp_path / "b", "gpu-02"), NVIDIA, 8)
    (stall,) = nccl_tests.bootstrap_hang(views)  # the root's thread cannot send gpu-02's ranks their peers
    assert (stall.rank, stall.device, stall.thread, stall.function) == (0, 0, 4201, "socketStartConnect")
    assert PEER.match(stall.peer)[1] == "10.213.7.12" and 32768 <= int(PEER.match(stall.peer)[2]) <= 60999
    views, _ = views_of(lab_pair(tmp_path / "c", None), NVIDIA, 8)
    assert nccl_tests.bootstrap_hang(views) is None


def test_under_mpirun_the_ranks_hang_retrying_the_root_they_cannot_reach(tmp_path, capsys, monkeypatch):
    hosts = lab_pair(tmp_path, "gpu-01")
    statuses, slept = mpirun(monkeypatch, "all_reduce", "nvidia", hosts, "-b", TARGET, "-e", TARGET, "-g", "8",
                             environ={"NCCL_DEBUG": "INFO"}, sleeps=3)
    assert statuses == ["hung", "hung"]  # neither returned: the job ends only when the caller kills it
    assert slept == [[3600.0] * 3, [127.0, 127.1, 127.2]]
    out = capsys.readouterr().out
    assert [DEVICE.match(line)[4] for line in out.splitlines() if DEVICE.match(line)] == ["gpu-01"] * 8 + ["gpu-02"] * 8
    assert not rows(out) and "# Collective test concluded" not in out and "#       size" not in out
    retries = [RETRY_LINE.match(line) for line in out.splitlines() if RETRY_LINE.match(line)]
    assert [(line[1], line[4], line[5], line[7], line[8]) for line in retries] == [
        ("gpu-02", str(device), "socketPollConnect", str(attempt), str(attempt * 100))
        for attempt in (1, 2) for device in range(8)]
    assert {PEER.match(line[6])[1] for line in retries} == {"10.213.7.11"}


def test_under_mpirun_the_root_hangs_sending_to_the_host_it_cannot_reach(tmp_path, capsys, monkeypatch):
    hosts = lab_pair(tmp_path, "gpu-02")
    statuses, slept = mpirun(monkeypatch, "alltoall", "nvidia", hosts, "-b", TARGET, "-e", TARGET, "-g", "8",
                             environ={"NCCL_DEBUG": "INFO"}, sleeps=2)
    assert statuses == ["hung", "hung"] and slept == [[127.0, 127.1], [3600.0, 3600.0]]
    (retry,) = [RETRY_LINE.match(line) for line in capsys.readouterr().out.splitlines() if RETRY_LINE.match(line)]
    assert retry.group(1, 4, 5, 7) == ("gpu-01", "0", "socketStartConnect", "1")
    assert int(retry[3]) == int(retry[2]) + 1 and PEER.match(retry[6])[1] == "10.213.7.12"


def test_at_warn_the_hang_is_silent(tmp_path, capsys, monkeypatch):
    """The retries log at INFO: with NCCL_DEBUG=WARN, as the fabric check runs, the job just stops after the
    devices and NCCL's version line."""
    statuses, slept = mpirun(monkeypatch, "all_reduce", "nvidia", lab_pair(tmp_path, "gpu-01"), "-g", "8",
                             environ={"NCCL_DEBUG": "WARN"}, sleeps=2)
    assert statuses == ["hung", "hung"] and slept == [[3600.0] * 2] * 2
    lines = capsys.readouterr().out.splitlines()
    assert DEVICE.match(lines[-2]) and lines[-1] == "NCCL version 2.28.7+cuda13.0"


def test_rccl_retries_with_its_own_nccl_releases_wording(tmp_path, capsys, monkeypatch):
    from .test_sim_rccl_tests import amd_host

    def mi_host(root, name, faults=None):
        return amd_host(root, name, release=release, faults=faults)

    for release, expected in (("7.0.2", "socketPollConnect: connect returned Connection timed out, retrying (1/34) "
                                        "after sleep for 100 msec"), ("6.4.1", None)):
        hosts = lab_pair(tmp_path / release, "gpu-01", vendor_host=mi_host)
        statuses, _ = mpirun(monkeypatch, "all_reduce", "amd", hosts, "-g", "8", environ={"NCCL_DEBUG": "INFO"},
                             sleeps=2)
        info = [re.match(r"^gpu-02:\d+:\d+ \[(\d)\] NCCL INFO (.+)$", line).groups()
                for line in capsys.readouterr().out.splitlines() if "connect" in line]
        assert statuses == ["hung", "hung"]
        assert info == ([(str(device), expected) for device in range(8)] if expected else [])


def test_a_job_on_one_host_goes_through(tmp_path, capsys):
    host = on_the_lab_network(lab_host(tmp_path, faults={"bootstrap_unreachable": True}), "10.213.7.11")
    status, out, _ = run(nccl_tests.nccl_all_reduce_main, capsys, host, "-b", TARGET, "-e", TARGET, "-g", "8")
    assert status == 0 and len(rows(out)) == 1
