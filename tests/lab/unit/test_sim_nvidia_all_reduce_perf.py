"""Simulated all_reduce_perf against real nccl-tests reports: same header, columns and footer."""

import re

import pytest

from k3ops.lab.sim import all_reduce_perf

from ...conftest import REAL_FIXTURES
from ..fake_host import nvidia_host, run

V218_SOCKET = "nccl-tests/08_nccl_allreduce_v2.18_format_socket_2rank_tagged.txt"
H100_2NODE = "nccl-tests/01_nccl_allreduce_h100_2node_16gpu.txt"
# Parsers written against the real reports.
NTHREAD = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
                     r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)$")
DEVICE = re.compile(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[([0-9a-f]{4}:[0-9a-f]{2}:"
                    r"[0-9a-f]{2})\] (.+)$")
ROW = re.compile(r"^ +(\d+) +(\d+) +float +sum +-1 +(\S+) +(\S+) +(\S+) +(\d+) +(\S+) +(\S+) +(\S+) +(\d+)$")
AVERAGE = re.compile(r"^# Avg bus bandwidth    : (\S+) $")


def report(relative):
    """A report's program output: below the fixture's provenance lines, without mpirun's tags."""
    text = (REAL_FIXTURES / relative).read_text()
    return [re.sub(r"^\[1,\d\]<stdout>:", "", line) for line in text.splitlines()
            if line.startswith(("#", " ", "[1,0]<stdout>:")) and not line.startswith(("# SOURCE", "# WHAT", "# NOTE",
                                                                                     "# WHY", "# ----"))]


def token_ends(line):
    return [match.end() for match in re.finditer(r"\S+", line)]


@pytest.fixture
def h200_report(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path)
    status, out, _ = run(all_reduce_perf, capsys, host, "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert status == 0
    return out.splitlines(), hardware


def test_header_is_the_real_nccl_tests_header(h200_report):
    lines, hardware = h200_report
    real = report(V218_SOCKET)
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
    assert DEVICE.match(real[5]) and DEVICE.match(report(H100_2NODE)[4])


def test_table_columns_line_up_with_the_real_report(h200_report):
    lines, _ = h200_report
    real = report(V218_SOCKET)
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
    real = report(V218_SOCKET)
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
    _, out, _ = run(all_reduce_perf, capsys, host, "-b", "8G", "-e", "8G", "-g", "8")
    row = next(ROW.match(line) for line in out.splitlines() if ROW.match(line))
    assert 235 < float(row[5]) < 240  # half the links of one GPU: half the bus bandwidth


def test_b300_gb300_use_their_links(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(all_reduce_perf, capsys, host, "-b", "1G", "-e", "1G", "-g", "4")
    row = next(ROW.match(line) for line in out.splitlines() if ROW.match(line))
    assert 900 < float(row[5]) < 957 and "[0008:06:00] NVIDIA GB300" in out


def test_failures_as_nccl_tests_prints_them(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path / "a", nccl=None)
    status, _, err = run(all_reduce_perf, capsys, host, "-g", "8")
    assert status == 127 and err == ("all_reduce_perf: error while loading shared libraries: libnccl.so.2: "
                                     "cannot open shared object file: No such file or directory\n")
    host, _ = nvidia_host(tmp_path / "b", module=None)
    status, out, _ = run(all_reduce_perf, capsys, host, "-g", "8")
    assert status == 2
    assert out.splitlines()[-2] == "gpu-01: Test CUDA failure util.cu:553 'no CUDA-capable device is detected'"
    assert re.match(r"^ \.\. gpu-01 pid \d+: Test failure common\.cu:1100$", out.splitlines()[-1])
    host, _ = nvidia_host(tmp_path / "c")
    status, out, err = run(all_reduce_perf, capsys, host, "-g", "16")
    assert status == 5 and err == ("Invalid number of GPUs: 16 requested but only 8 were found.\n"
                                   "Please check the number of processes and GPUs per process.\n")
