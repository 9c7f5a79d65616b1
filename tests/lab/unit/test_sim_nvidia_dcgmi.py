"""Simulated dcgmi against the real dcgmi diag tables and DCGM 4.4's own output formats."""

import re
import socket

import pytest

from k3ops_lab.sim import dcgmi

from ...conftest import real_output
from ..fake_host import nvidia_host, run

DIAG_R4 = "dcgmi/dcgmi-diag-r4_all-pass_dcgm2x-era.txt"
DIAG_ROW = re.compile(r"^\| (?P<name>.{25}) \| (?P<info>.{46}) \|$")
CATEGORY = re.compile(r"^[|+]-----  (?P<category>\w+)  -+\+-+[|+]$")
DISCOVERY_ROW = re.compile(r"^\| (?P<id>.{6}) \| (?P<info>.{68}) \|$")


@pytest.fixture
def hostengine():
    """An nv-hostengine stand-in: something listening where dcgmi connects."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def no_hostengine():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
    return address


def diag_rows(out):
    lines = out.splitlines()
    assert lines[0] == "Successfully ran diagnostic for group."
    return lines[1:]


def test_diag_table_has_the_real_frame(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path)
    status, out, _ = run(dcgmi, capsys, host, "diag", "-r", "4")
    real, sim = real_output(DIAG_R4).splitlines(), out.splitlines()
    assert status == 0
    assert sim[:4] == real[:4] and sim[-1] == real[-1]  # title, header, double rule; closing rule
    real_headings = {line for line in real if CATEGORY.match(line)}
    sim_headings = [line for line in sim if CATEGORY.match(line)]
    assert [CATEGORY.match(line)["category"] for line in sim_headings] == \
        ["Metadata", "Deployment", "Hardware", "Integration", "Stress"]
    assert set(sim_headings) - real_headings == {sim_headings[0]}  # DCGM 4 adds the Metadata section
    assert all(DIAG_ROW.match(line) or CATEGORY.match(line) for line in sim[4:-1])


def test_diag_levels_list_dcgm4_tests_per_gpu(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(dcgmi, capsys, host, "diag", "-r", "3")
    rows = [DIAG_ROW.match(line) for line in diag_rows(out)]
    named = [(row["name"].strip(), row["info"].strip()) for row in rows if row]
    assert named[:4] == [("Diagnostic", "Result"), ("DCGM Version", "4.4.1"), ("Driver Version Detected", "580.105.08"),
                         ("GPU Device IDs Detected", "31c2, 31c2, 31c2, 31c2")]
    tests = [name for name, info in named[4:] if name]
    assert tests == ["software", "memory", "diagnostic", "nvbandwidth", "pcie", "memory_bandwidth", "targeted_stress",
                     "targeted_power"]
    software = named.index(("software", "Pass"))
    assert named[software + 1:software + 5] == [("", f"GPU{i}: Pass") for i in range(len(hardware["gpus"]))]
    _, out, _ = run(dcgmi, capsys, host, "diag", "-r", "1")
    assert [name for name, _ in ((row["name"].strip(), 0) for row in map(DIAG_ROW.match, diag_rows(out)) if row)
            if name][4:] == ["software"]


def test_pending_row_remap_fails_the_software_test(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, faults={"remapped_rows_pending": [3]})
    status, out, _ = run(dcgmi, capsys, host, "diag", "-r", "1")
    assert status == 226
    lines = diag_rows(out)
    assert "| software                  | Fail                                           |" in lines
    failed = lines.index("|                           | GPU3: Fail                                     |")
    warning = lines[failed + 1:failed + 5]
    assert [DIAG_ROW.match(line)["name"].strip() for line in warning] == ["Warning: GPU3", "", "", ""]
    assert "".join(DIAG_ROW.match(line)["info"].rstrip() for line in warning) == (
        "GPU 3 had memory errors and row remappings are pending Check DCGM and system logs for errors. Reset GPU. "
        "Restart DCGM. Rerun diagnostics.")


def test_persistence_mode_off_warns(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, persistence=False)
    status, out, _ = run(dcgmi, capsys, host, "diag", "-r", "1")
    assert status == 226
    assert "| software                  | Warn                                           |" in out.splitlines()
    assert "| Warning: GPU0             | Persistence mode for GPU 0 is disabled. Enabl  |" in out.splitlines()


def test_diag_without_driver_cannot_start_an_embedded_engine(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, module=None)
    status, out, _ = run(dcgmi, capsys, host, "diag", "-r", "1")
    assert (status, out) == (249, "Error: Unable to start an embedded host engine. DCGM initialization error.\n")


def test_discovery_needs_the_hostengine(tmp_path, capsys, no_hostengine):
    host, _ = nvidia_host(tmp_path)
    status, out, _ = run(dcgmi, capsys, host, "discovery", "-l", "--host", no_hostengine)
    assert status == 235
    assert out == (f"Error: unable to establish a connection to the specified host: {no_hostengine}\n"
                   "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")


def test_discovery_lists_gpus_and_nvswitches(tmp_path, capsys, hostengine):
    host, hardware = nvidia_host(tmp_path)
    status, out, _ = run(dcgmi, capsys, host, "discovery", "-l", "--host", hostengine)
    lines = out.splitlines()
    assert status == 0 and lines[0] == "8 GPUs found."
    assert lines[1] == lines[3] == "+--------+" + "-" * 70 + "+"
    assert lines[2] == "| GPU ID | Device Information                                                   |"
    entries = [DISCOVERY_ROW.match(line) for line in lines[4:4 + 8 * 4]]
    assert [(m["id"].strip(), m["info"].strip()) for m in entries[:3]] == [
        ("0", "Name: NVIDIA H200"), ("", "PCI Bus ID: 00000000:18:00.0"),
        ("", f"Device UUID: {hardware['gpus'][0]['uuid']}")]
    switches = lines.index("4 NvSwitches found.")
    assert lines[switches + 1:switches + 9] == ["+-----------+", "| Switch ID |", "+-----------+", "| 0         |",
                                                "| 1         |", "| 2         |", "| 3         |", "+-----------+"]
    assert lines[switches + 9:switches + 14] == ["0 ConnectX found.", "+----------+", "| ConnectX |", "+----------+",
                                                 "+----------+"]
    assert lines[-5] == "0 CPUs found."


def test_discovery_on_grace_lists_the_cpus(tmp_path, capsys, hostengine):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(dcgmi, capsys, host, "discovery", "--list", "--host", hostengine)
    lines = out.splitlines()
    cpus = lines.index("2 CPUs found.")
    assert "0 NvSwitches found." in lines
    assert [DISCOVERY_ROW.match(line)["info"].strip() for line in lines[cpus + 4:cpus + 7]][::2] == \
        ["Name: Grace TH500", "Cores: 0-71"]


def test_dmon_prints_dcgm_columns(tmp_path, capsys, hostengine):
    host, _ = nvidia_host(tmp_path)
    status, out, _ = run(dcgmi, capsys, host, "dmon", "-e", "155,150,203", "-c", "2", "--host", hostengine)
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 + 2 * 8
    # DeviceMonitor: an 11-wide entity column, then each field's width + 6 + 2 of padding.
    assert lines[0] == "#Entity    POWER             TMPTR        GPUTL             "
    assert lines[1] == "ID          W                 C                             "
    row = re.match(r"^GPU (\d)      (\d+\.\d{3}) +(\d+) +(\d+) +$", lines[2])
    assert row and row[1] == "0" and len(lines[2]) == len(lines[0])


def test_dmon_serves_the_profiling_fields_blank_until_their_first_sample(tmp_path, capsys, hostengine):
    """As the capture in NVIDIA/DCGM issue 244 (DCGM 4.1-4.4 layout): an 11-wide entity column, ratios in 13-wide
    columns with 3 decimals, N/A on the first tick; byte rates as integers in 28-wide columns."""
    host, _ = nvidia_host(tmp_path)
    fields = ",".join(str(field) for field in range(1001, 1013))
    status, out, _ = run(dcgmi, capsys, host, "dmon", "-e", fields, "-c", "2", "--host", hostengine)
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 + 2 * 8
    assert lines[0].split() == ["#Entity", "GRACT", "SMACT", "SMOCC", "TENSO", "DRAMA", "FP64A", "FP32A", "FP16A",
                                "PCITX", "PCIRX", "NVLTX", "NVLRX"]
    assert lines[0].startswith("#Entity    GRACT        SMACT        ") and lines[1].split() == ["ID"]
    assert lines[2] == "GPU 0      " + "N/A          " * 8 + f"{'N/A':<28}" * 4
    later = re.match(r"^GPU 0      (\d\.\d{3} {8}){8}(\d+ +){4}$", lines[10])
    assert later and len(lines[10]) == len(lines[0])
