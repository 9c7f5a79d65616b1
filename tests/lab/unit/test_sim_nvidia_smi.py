"""Simulated nvidia-smi against real nvidia-smi captures: same borders, columns, labels and spellings; the
NVLink fabric state as fabric manager leaves it, read by the fact the fabric pre-checks use."""

import json
import os
import re
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from k3ops.facts.gpu_health import NvidiaGpuReport
from k3ops_lab.sim import daemons, nvidia_smi
from k3ops_lab.sim.host import NVIDIA_MODULE_VERSION, PACKAGE_VERSIONS

from ...conftest import real_output
from ..fake_host import freeze_clock, nvidia_host, run, write

TABLE_GB300 = "nvidia-smi-table/gb300-x4_580.105.08_oci.txt"
TABLE_H200 = "nvidia-smi-table/h200-x1_590.48.01_load_with-processes.txt"
Q_H200 = "nvidia-smi-q/h200-x1_590.48.01_nvidia-smi-q_load.txt"
REMAPPED_PENDING = "row-remapper/nvidia-smi-q_ecc-and-remapped-rows_pending-yes_a100.txt"
MISMATCH = "driver-mismatch/nvidia-smi_nvml-mismatch_classic.txt"
ALL_FIELDS_CSV = "query-gpu-csv/h100-x1_590.48.01_all-fields_csv-with-header_load.txt"
COMPUTE_APPS_CSV = "query-gpu-csv/h100-x1_590.48.01_query-compute-apps_csv.txt"
TOPO_GB200 = "topo/topo-m_gb200-x4_nv18_8nics_580.126.09.txt"
TOPO_H200 = "topo/topo-m_h200-x1_590.48.01_ansi-escapes.txt"
NVLINK_H200 = "nvlink/nvlink-s_h200-x1_590.48.01.txt"

# Parsers of the kind validation suites run, written against the real captures.
TIMESTAMP = re.compile(r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\s*$")
HEADER = re.compile(r"^\| NVIDIA-SMI (?P<smi>\S+) +Driver Version: (?P<driver>\S+) +CUDA Version: (?P<cuda>\S+) +\|$")
ROW_IDENTITY = re.compile(
    r"^\| +(?P<index>\d+)  (?P<name>.+?) +(?P<persistence>On|Off) +\| +(?P<bus_id>[0-9A-F]{8}:[0-9A-F]{2}:"
    r"[0-9A-F]{2}\.\d) (?P<display>On|Off) \| +(?P<ecc>\S+) \|$")
ROW_READINGS = re.compile(
    r"^\| +(?P<fan>\S+) +(?P<temperature>\d+)C +(?P<pstate>P\d+) +(?P<usage>\d+)W / +(?P<cap>\d+)W \| +"
    r"(?P<used>\d+)MiB / +(?P<total>\d+)MiB \| +(?P<utilization>\S+) +(?P<compute>\S+) \|$")
ROW_MIG = re.compile(r"^\| {41}\| {24}\| +(?P<mig>\S+) \|$")
Q_LINE = re.compile(r"^(?P<indent>(?: {4})*)(?P<label>\S.*?)(?: +: (?P<value>.*))?$")
GPU_LIST = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+) \(UUID: (?P<uuid>GPU-[0-9a-f-]{36})\)$")


@pytest.fixture(autouse=True)
def _frozen(monkeypatch):
    freeze_clock(monkeypatch)


def separators(line):
    return [position for position, character in enumerate(line) if character in "|+"]


def test_no_kernel_module_is_the_real_failure(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, module=None)
    status, out, _ = run(nvidia_smi, capsys, host)
    assert status == 9
    assert out == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                   "Make sure that the latest NVIDIA driver is installed and running.\n\n")


def test_version_mismatch_is_the_real_failure(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, driver="580.126.09", module="580.105.08")
    status, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=name", "--format=csv")
    assert status == 18
    first, second = out.splitlines()
    assert first == real_output(MISMATCH).strip()
    assert second == "NVML library version: 580.126"


def test_gb300_table_matches_the_real_gb300_table(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    status, out, _ = run(nvidia_smi, capsys, host)
    real, sim = real_output(TABLE_GB300).splitlines(), out.splitlines()
    assert status == 0 and len(sim) == len(real)
    assert TIMESTAMP.match(real[0]) and sim[0] == "Fri Jul  3 22:11:09 2026       "
    for real_line, sim_line in zip(real[1:], sim[1:]):
        assert separators(sim_line) == separators(real_line), sim_line
        for row in (ROW_IDENTITY, ROW_READINGS, ROW_MIG, HEADER):
            if row.match(real_line):
                real_fields, sim_fields = row.match(real_line).groupdict(), row.match(sim_line).groupdict()
                for dynamic in ("temperature", "usage", "used"):
                    real_fields.pop(dynamic, None), sim_fields.pop(dynamic, None)
                assert sim_fields == real_fields
                break
        else:
            assert sim_line == real_line


def test_h200_table_header_and_first_gpu_match_the_590_capture(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, driver="590.48.01", module="590.48.01")
    _, out, _ = run(nvidia_smi, capsys, host)
    real, sim = real_output(TABLE_H200).splitlines(), out.splitlines()
    assert sim[:8] == real[:8]  # timestamp, banner, column headings
    assert sim[8] == real[8].replace("00000000:83:00.0", "00000000:18:00.0")
    assert separators(sim[9]) == separators(real[9]) and ROW_READINGS.match(sim[9])
    assert sim[10:12] == real[10:12]
    assert [ROW_IDENTITY.match(line)["bus_id"] for line in sim if ROW_IDENTITY.match(line)] == \
        [f"0000{gpu['pci_bus_id'].upper()}" for gpu in hardware["gpus"]]
    assert sim[-7:] == real_output(TABLE_GB300).splitlines()[-7:]  # the empty Processes box


@pytest.mark.parametrize(("name", "real_cell"), [
    # Both cells copied from real 580-driver tables.
    ("NVIDIA RTX 6000 Ada Generation", "|   0  NVIDIA RTX 6000 Ada Gene...    On  |"),
    ("NVIDIA B300 SXM6 AC", "|   0  NVIDIA B300 SXM6 AC            On  |"),
])
def test_long_names_are_cut_as_nvidia_smi_cuts_them(tmp_path, capsys, name, real_cell):
    host, hardware = nvidia_host(tmp_path)
    hardware["gpu_model"]["name"] = name
    (tmp_path / "etc/k3ops-lab/hardware.json").write_text(json.dumps(hardware))
    _, out, _ = run(nvidia_smi, capsys, host)
    assert out.splitlines()[8].startswith(real_cell)


def test_persistence_off_without_persistenced(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, persistence=False)
    _, out, _ = run(nvidia_smi, capsys, host)
    assert {ROW_IDENTITY.match(line)["persistence"] for line in out.splitlines() if ROW_IDENTITY.match(line)} == {"Off"}


def test_list_and_version(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, profile="b300x8")
    _, out, _ = run(nvidia_smi, capsys, host, "-L")
    listed = [GPU_LIST.match(line).groupdict() for line in out.splitlines()]
    assert listed == [{"index": str(i), "name": "NVIDIA B300 SXM6 AC", "uuid": gpu["uuid"]}
                      for i, gpu in enumerate(hardware["gpus"])]
    _, out, _ = run(nvidia_smi, capsys, host, "--version")
    assert out == ("NVIDIA-SMI version  : 580.105.08\nNVML version        : 580.105\n"
                   "DRIVER version      : 580.105.08\nCUDA Version        : 13.0\n")


def q_entries(text):
    """-q lines as ((ancestor labels..., label), value) pairs, the way the real layout nests them."""
    entries, stack = [], []
    for line in text.splitlines():
        match = Q_LINE.match(line)
        if not line or not match:
            continue
        depth = len(match["indent"]) // 4
        stack[depth:] = [match["label"].rstrip()]
        entries.append((tuple(stack), match["value"]))
    return entries


def start_fabric_manager(host, capsys, monkeypatch):
    """Start the simulated nv-fabricmanager (and nvlsm's package) at the driver's version, as systemd would
    after boot; it returns at once instead of serving until stopped."""
    for package in ("nvidia-fabricmanager", "nvlsm"):
        write(host.root, f"{PACKAGE_VERSIONS}/{package}", host.nvidia_module_version() + "\n")
    host.path(daemons.FM_LOG).parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(daemons, "_serve_until_stopped", lambda cleanup=None: 0)
    assert daemons.fabricmanager_main([], host) == 0
    capsys.readouterr()


def without_processes(entries):
    """The entries of a one-GPU report under a plain "GPU" heading, its Processes block left out."""
    return [(tuple("GPU" if label.startswith("GPU 0000") else label for label in path), value)
            for path, value in entries if "Processes" not in path]


def test_q_has_the_590_layout_and_values(tmp_path, capsys, monkeypatch):
    host, _ = nvidia_host(tmp_path, driver="590.48.01", module="590.48.01")
    start_fabric_manager(host, capsys, monkeypatch)  # the capture's HGX GPU is registered with the fabric
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-i", "0")
    real = without_processes(q_entries(real_output(Q_H200)))
    sim = without_processes(q_entries(out))
    assert [path for path, _ in sim] == [path for path, _ in real]
    assert {line.index(": ") for line in out.splitlines() if ": " in line} == {55}
    real_values, sim_values = dict(real), dict(sim)
    same = [path for path in real_values if path[-1] in (
        "Product Name", "Product Architecture", "Display Mode", "Persistence Mode", "VBIOS Version",
        "GPU Part Number", "Device Id", "Sub System Id", "GSP Firmware Version", "Max Power Limit",
        "Min Power Limit", "Default Power Limit", "Module Id", "Driver Version", "CUDA Version",
    ) or path[1:2] in (("Max Clocks",), ("Remapped Rows",), ("Fabric",), ("Retired Pages",), ("ECC Mode",))
        or path[1:] in (
        ("FB Memory Usage", "Total"), ("FB Memory Usage", "Reserved"), ("BAR1 Memory Usage", "Total"))]
    assert len(same) > 40
    assert {path: sim_values[path] for path in same} == {path: real_values[path] for path in same}
    assert sim_values[("Timestamp",)] == real_values[("Timestamp",)] == "Fri Jul  3 22:11:09 2026"


def test_q_attached_gpus_and_selection(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path)
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-i", "1")
    entries = dict(q_entries(out))
    assert entries[("Attached GPUs",)] == "8"
    assert [line for line in out.splitlines() if line.startswith("GPU ")] == ["GPU 00000000:2A:00.0"]
    assert entries[("GPU 00000000:2A:00.0", "GPU UUID")] == hardware["gpus"][1]["uuid"]


def test_pending_row_remap_shows_as_in_the_real_capture(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, faults={"remapped_rows_pending": [3]})
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "ROW_REMAPPER")
    blocks = out.split("GPU 0000")[1:]
    assert len(blocks) == 8
    real = [(path[1:], value) for path, value in q_entries("GPU\n" + real_output(REMAPPED_PENDING))
            if len(path) > 1 and path[1] == "Remapped Rows"]
    for index, block in enumerate(blocks):
        sim = [(path[1:], value) for path, value in q_entries("GPU" + block)][1:]
        assert [path for path, _ in sim] == [path for path, _ in real]
        values = dict(sim)
        assert values[("Remapped Rows", "Pending")] == ("Yes" if index == 3 else "No")
    pending = dict((path[1:], value) for path, value in q_entries("GPU" + blocks[3]))
    assert pending[("Remapped Rows", "Correctable Error")] == dict(real)[("Remapped Rows", "Correctable Error")]
    assert pending[("Remapped Rows", "Bank Remap Availability Histogram", "High")] == "1 bank(s)"


def test_q_display_keeps_only_the_asked_sections(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path)
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "MEMORY,ECC", "-i", "0")
    sections = [path[1] for path, _ in q_entries(out) if len(path) == 2 and path[0].startswith("GPU ")]
    assert sections == ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage", "ECC Mode",
                        "ECC Errors"]


def fabric_states(out):
    """Each GPU's (State, Status) in the fabric, read by the fact the NVLink pre-check runs."""
    return {(gpu["fabric_state"], gpu["fabric_status"]) for gpu in NvidiaGpuReport().process(out.splitlines())}


@pytest.mark.parametrize("profile", ["h200x8", "b300x8"])
def test_fabric_is_not_started_until_fabric_manager_configures_it(tmp_path, capsys, monkeypatch, profile):
    host, hardware = nvidia_host(tmp_path, profile=profile)
    assert NvidiaGpuReport().command == "nvidia-smi -q 2>/dev/null || true"
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    facts = NvidiaGpuReport().process(out.splitlines())
    assert [(gpu["bus_id"], gpu["fabric_state"], gpu["fabric_status"]) for gpu in facts] == [
        (f"0000{gpu['pci_bus_id'].upper()}", "Not Started", "N/A") for gpu in hardware["gpus"]]
    fabric = [(path[2], value) for path, value in q_entries(out) if path[1:2] == ("Fabric",) and len(path) == 3]
    assert fabric[:4] == [("State", "Not Started"), ("Status", "N/A"), ("CliqueId", "0"),
                          ("ClusterUUID", "00000000-0000-0000-0000-000000000000")]
    _, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=fabric.state,fabric.status", "--format=csv")
    assert out.splitlines() == ["fabric.state, fabric.status"] + ["Not Started, N/A"] * len(hardware["gpus"])
    start_fabric_manager(host, capsys, monkeypatch)
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert fabric_states(out) == {("Completed", "Success")}
    _, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=fabric.state,fabric.status", "--format=csv,noheader")
    assert set(out.splitlines()) == {"Completed, Success"}


def test_registration_outlives_fabric_manager_until_the_driver_reloads(tmp_path, capsys, monkeypatch):
    """Registered GPUs stay Completed when fabric manager stops; after a reboot loads the driver again they are
    Not Started until fabric manager runs again."""
    host, _ = nvidia_host(tmp_path)
    start_fabric_manager(host, capsys, monkeypatch)  # then stopped: the simulated daemon has already returned
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert fabric_states(out) == {("Completed", "Success")}
    logged = host.path(daemons.FM_LOG).stat().st_mtime
    os.utime(host.path(NVIDIA_MODULE_VERSION), (logged + 60, logged + 60))  # the boot layer loads it again
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert fabric_states(out) == {("Not Started", "N/A")}


def test_fabric_manager_that_never_configured_leaves_the_fabric_not_started(tmp_path, capsys):
    """A log without the line fabric manager writes once it configured the NVSwitches is no registration."""
    host, _ = nvidia_host(tmp_path, profile="b300x8")
    write(tmp_path, daemons.FM_LOG, "[INFO] Fabric Manager version 580.105.08 is running\n")
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert fabric_states(out) == {("Not Started", "N/A")}


def test_nvlink_domain_trays_are_registered_without_local_fabric_manager(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert fabric_states(out) == {("Completed", "Success")}


def csv_columns(relative):
    header, row = real_output(relative).splitlines()[:2]
    return dict(zip(header.split(", "), row.split(", ")))


def shape(value):
    """A value with its digits and hex digits blurred: "631.95 W" and "77.32 W" have the same shape."""
    return re.sub(r"[0-9a-fA-F]+", "x", value)


BRIEF_FIELDS = ("index,name,uuid,serial,pci.bus_id,driver_version,vbios_version,memory.total,memory.used,memory.free,"
                "temperature.gpu,power.draw,power.limit,utilization.gpu,persistence_mode,pstate,clocks.sm,"
                "ecc.errors.uncorrected.volatile.total,compute_cap,count")


def test_query_gpu_headers_units_and_values_as_real(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path)
    status, out, _ = run(nvidia_smi, capsys, host, f"--query-gpu={BRIEF_FIELDS}", "--format=csv")
    real = csv_columns(ALL_FIELDS_CSV)
    header, *rows = out.splitlines()
    assert status == 0 and len(rows) == 8
    printed = BRIEF_FIELDS.replace("clocks.sm", "clocks.current.sm").split(",")
    expected_header = [next(column for column in real if column.split(" [")[0] == name) for name in printed]
    assert header.split(", ") == expected_header
    for row, gpu in zip(rows, hardware["gpus"]):
        values = dict(zip(expected_header, row.split(", ")))
        assert {column: shape(value) for column, value in values.items() if column not in ("name", "count")} == \
            {column: shape(real[column]) for column in expected_header if column not in ("name", "count")}
        assert values["uuid"] == gpu["uuid"] and values["serial"] == gpu["serial"]
        assert values["name"] == "NVIDIA H200" and values["count"] == "8"


def test_query_gpu_noheader_nounits_and_selection(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path)
    _, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=index,memory.total,power.limit,fan.speed",
                    "--format=csv,noheader,nounits", "-i", "3")
    assert out == "3, 143771, 700.00, [N/A]\n"


def test_unknown_query_field_is_the_real_error(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path)
    status, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=index,cuda_version", "--format=csv")
    assert status == 2 and out == 'Field "cuda_version" is not a valid field to query.\n\n'


def test_query_compute_apps_is_empty_with_the_real_header(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path)
    fields = real_output(COMPUTE_APPS_CSV).splitlines()[0].replace(" [MiB]", "").replace(", ", ",")
    _, out, _ = run(nvidia_smi, capsys, host, f"--query-compute-apps={fields}", "--format=csv")
    assert out == real_output(COMPUTE_APPS_CSV).splitlines()[0] + "\n"
    _, out, _ = run(nvidia_smi, capsys, host, "--query-compute-apps=pid", "--format=csv,noheader")
    assert out == ""


def as_pasted(text):
    """What a terminal copy of topo -m keeps: tabs become spaces, trailing tab stops are not characters."""
    return [line.rstrip("\t").expandtabs(8) for line in text.splitlines()]


def test_topo_gb300_matches_the_gb200_tray_capture(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, profile="gb300x4")
    _, out, _ = run(nvidia_smi, capsys, host, "topo", "-m")
    real, sim = as_pasted(real_output(TOPO_GB200)), as_pasted(out)
    real_gpu_rows = [line.split() for line in real if line.startswith("GPU")]
    sim_gpu_rows = [line.split() for line in sim if line.startswith("GPU")]
    # The tray's GPUs, their NVLinks and their CPU/NUMA affinity are the GB200 tray's; only its NICs differ.
    assert [row[:5] + row[-3:] for row in sim_gpu_rows] == [row[:5] + row[-3:] for row in real_gpu_rows]
    assert all(cell == "SYS" for row in sim_gpu_rows for cell in row[5:-3])
    legend = real.index("Legend:")
    assert sim[sim.index("Legend:") - 1:sim.index("Legend:") + 11] == real[legend - 1:legend + 11]
    assert sim[sim.index("NIC Legend:"):-1] == ["NIC Legend:", "", *(f"  NIC{i}: mlx5_{i}" for i in range(4))]
    assert sim[0].split() == [f"GPU{i}" for i in range(4)] + [f"NIC{i}" for i in range(4)] + \
        ["CPU", "Affinity", "NUMA", "Affinity", "GPU", "NUMA", "ID"]


def test_topo_h200_rows_tabs_and_terminal_underline(tmp_path, capsys, monkeypatch):
    host, _ = nvidia_host(tmp_path)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _, out, _ = run(nvidia_smi, capsys, host, "topo", "-m")
    real = real_output(TOPO_H200).splitlines()
    lines = out.splitlines()
    assert re.fullmatch(r"\t\x1b\[4mGPU0(\tGPU\d)+(\tNIC\d)+\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b\[0m",
                        lines[0])
    assert real[0].startswith("\t\x1b[4mGPU0\t")
    assert real[0].endswith("\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    gpu0 = lines[1].split("\t")
    assert gpu0[:2] == real[1].split("\t")[:2] == ["GPU0", " X "]
    assert gpu0[2:9] == ["NV18"] * 7
    assert gpu0[9:17] == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert gpu0[17:] == ["0-55,112-167", "0", "", "N/A"]  # the capture's "0-23\t0\t\tN/A" layout
    assert lines[9].split("\t") == ["NIC0", "PIX", "NODE", "NODE", "NODE"] + ["SYS"] * 4 + [" X ", "NODE", "NODE",
                                                                              "NODE"] + ["SYS"] * 4 + [""] * 4
    assert lines[lines.index("Legend:") - 1:lines.index("Legend:") + 9] == real[2:]


def test_nvlink_status_is_the_real_listing(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, driver="590.48.01", module="590.48.01")
    _, out, _ = run(nvidia_smi, capsys, host, "nvlink", "--status", "-i", "0")
    assert out.splitlines() == [line.replace("GPU-00000000-0000-0000-0000-000000000000", hardware["gpus"][0]["uuid"])
                                for line in real_output(NVLINK_H200).splitlines()]


def test_down_nvlinks_show_inactive_and_shrink_the_bond(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path, faults={"nvlink_down_links": {"2": [0, 5]}})
    _, out, _ = run(nvidia_smi, capsys, host, "nvlink", "-s", "-i", "2")
    assert "\t Link 5: <inactive>" in out.splitlines() and out.count("<inactive>") == 2
    _, out, _ = run(nvidia_smi, capsys, host, "topo", "-m")
    assert out.splitlines()[1].split("\t")[3] == "NV16"


def test_persistence_mode_needs_root_and_then_sticks(tmp_path, capsys, monkeypatch):
    host, _ = nvidia_host(tmp_path, persistence=False)
    monkeypatch.setattr(nvidia_smi, "running_as_root", lambda: False)
    status, out, _ = run(nvidia_smi, capsys, host, "-pm", "1")
    assert status == 4
    assert out == ("Unable to set persistence mode for GPU 00000000:18:00.0: Insufficient Permissions\n"
                   "Terminating early due to previous errors.\n")
    monkeypatch.setattr(nvidia_smi, "running_as_root", lambda: True)
    status, out, _ = run(nvidia_smi, capsys, host, "-i", "0", "-pm", "1")
    assert status == 0 and out == "Enabled Legacy persistence mode for GPU 00000000:18:00.0.\nAll done.\n"
    assert host.persistence_mode()
    _, out, _ = run(nvidia_smi, capsys, host, "-pm", "0", "-i", "0")
    assert out == "Disabled persistence mode for GPU 00000000:18:00.0.\nAll done.\n"


def test_bad_arguments_are_refused_as_nvidia_smi_does(tmp_path, capsys):
    host, _ = nvidia_host(tmp_path)
    status, out, _ = run(nvidia_smi, capsys, host, "-lms100")
    assert status == 2 and out == "ERROR: Option -lms100 is not recognized. Please run 'nvidia-smi -h' for help.\n\n"
    status, out, _ = run(nvidia_smi, capsys, host, "-i", "9")
    assert status == 6 and out == "No devices were found\n"
    status, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=name")
    assert status == 2 and out.startswith('"--format=" switch is missing.')


# GPU reset (-r): refused while a client holds the GPUs, as root only; it activates a pending row remap.
IN_USE_ONE = ("The following GPUs could not be reset:\n"
              "  GPU 00000000:{bus}:00.0: In use by another client\n\n"
              "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
              "application, graphics application such as an X server, or a monitoring application such as another "
              "instance of nvidia-smi). Please first kill all processes using this device and all compute "
              "applications running in the system.\n")


@pytest.fixture
def root(monkeypatch):
    monkeypatch.setattr(nvidia_smi, "running_as_root", lambda: True)


@pytest.fixture
def no_hostengine(monkeypatch):
    """Nothing listens where nv-hostengine would (a port just closed)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        address = listener.getsockname()
    monkeypatch.setattr(nvidia_smi, "HOSTENGINE_ADDRESS", address)


def remapped_rows(out):
    return {path[-1]: value for path, value in q_entries(out) if "Remapped Rows" in path}


def test_reset_is_refused_while_persistenced_holds_the_gpus(tmp_path, capsys, root, no_hostengine):
    host, _ = nvidia_host(tmp_path, faults={"remapped_rows_pending": [3]})
    before = (tmp_path / "etc/k3ops-lab/hardware.json").read_text()
    status, out, _ = run(nvidia_smi, capsys, host, "-r", "-i", "3")
    assert status == 255 and out == IN_USE_ONE.format(bus="5D")
    assert (tmp_path / "etc/k3ops-lab/hardware.json").read_text() == before
    status, out, _ = run(nvidia_smi, capsys, host, "--gpu-reset", "-i", "0,1")
    assert status == 255
    assert out.splitlines()[1:3] == ["  GPU 00000000:18:00.0: In use by another client",
                                     "  GPU 00000000:2A:00.0: In use by another client"]
    assert out.splitlines()[4].startswith("2 devices are currently being used by")
    assert out.rstrip().endswith("kill all processes using these devices and all compute applications running "
                                 "in the system.")


def test_reset_is_refused_while_the_dcgm_host_engine_runs(tmp_path, capsys, root, monkeypatch):
    host, _ = nvidia_host(tmp_path, persistence=False)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        monkeypatch.setattr(nvidia_smi, "HOSTENGINE_ADDRESS", listener.getsockname())
        status, out, _ = run(nvidia_smi, capsys, host, "-r", "-i", "0")
    assert status == 255 and out == IN_USE_ONE.format(bus="18")


def test_reset_needs_root(tmp_path, capsys, monkeypatch, no_hostengine):
    host, _ = nvidia_host(tmp_path, persistence=False)
    monkeypatch.setattr(nvidia_smi, "running_as_root", lambda: False)
    status, out, _ = run(nvidia_smi, capsys, host, "-r", "-i", "0")
    assert status == 4
    assert out == "The following GPUs could not be reset:\n  GPU 00000000:18:00.0: Insufficient Permissions\n"


def test_reset_activates_the_pending_remap_and_the_inforom_keeps_it(tmp_path, capsys, root, no_hostengine):
    host, _ = nvidia_host(tmp_path, persistence=False, faults={"remapped_rows_pending": [3]})
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "ROW_REMAPPER", "-i", "3")
    assert remapped_rows(out)["Pending"] == "Yes" and remapped_rows(out)["Correctable Error"] == "1"
    status, out, _ = run(nvidia_smi, capsys, host, "-r", "-i", "3")
    assert status == 0 and out == "GPU 00000000:5D:00.0 was successfully reset.\nAll done.\n"
    faults = host.hardware()["faults"]
    assert "remapped_rows_pending" not in faults and faults["remapped_rows"] == {"3": 1}
    assert oct((tmp_path / "etc/k3ops-lab/hardware.json").stat().st_mode & 0o777) == "0o644"
    assert [path.name for path in (tmp_path / "etc/k3ops-lab").iterdir()] == ["hardware.json"]
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "ROW_REMAPPER", "-i", "3")
    rows = remapped_rows(out)
    # The InfoROM counted the row when it was marked: the count stays, Pending goes, one bank keeps its spare row spent.
    assert (rows["Correctable Error"], rows["Uncorrectable Error"], rows["Pending"]) == ("1", "0", "No")
    assert (rows["High"], rows["Remapping Failure Occurred"]) == ("1 bank(s)", "No")
    assert re.search(r"(?m)^ +Pending +: No$", out)  # the runbook's Verify
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "ECC", "-i", "3")
    dram = [value for path, value in q_entries(out) if path[-1] == "DRAM Correctable"]
    assert dram == ["0", "12"]  # the reset zeroed the volatile count; the aggregate one stays
    _, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=remapped_rows.correctable,remapped_rows.pending",
                    "--format=csv,noheader", "-i", "3")
    assert out == "1, No\n"
    run(nvidia_smi, capsys, host, "-r", "-i", "3")
    assert host.hardware()["faults"]["remapped_rows"] == {"3": 1}  # nothing was pending any more


def test_reset_of_every_gpu_on_an_nvswitch_board_resets_the_switches_too(tmp_path, capsys, root, no_hostengine):
    host, _ = nvidia_host(tmp_path, persistence=False)
    status, out, _ = run(nvidia_smi, capsys, host, "-r")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 10
    assert lines[0] == "GPU 00000000:18:00.0 was successfully reset."
    assert lines[8].startswith("Note: The operation has successfully reset all GPUs and NVSwitches.")
    assert lines[9] == "All done."


def test_remap_failure_shows_and_outlives_a_reset(tmp_path, capsys, root, no_hostengine):
    host, _ = nvidia_host(tmp_path, persistence=False, faults={"row_remap_failure": [2]})
    run(nvidia_smi, capsys, host, "-r", "-i", "2")
    _, out, _ = run(nvidia_smi, capsys, host, "-q", "-d", "ROW_REMAPPER")
    blocks = out.split("GPU 0000")[1:]
    failures = [remapped_rows("GPU" + block)["Remapping Failure Occurred"] for block in blocks]
    assert failures == ["No", "No", "Yes", "No", "No", "No", "No", "No"]
    assert remapped_rows("GPU" + blocks[2])["None"] == "1 bank(s)"
    _, out, _ = run(nvidia_smi, capsys, host, "--query-gpu=remapped_rows.failure", "--format=csv,noheader")
    assert out.split() == ["No", "No", "Yes", "No", "No", "No", "No", "No"]


def test_faults_follow_the_hardware_index_when_a_gpu_is_lost(tmp_path, capsys, root, no_hostengine):
    host, hardware = nvidia_host(tmp_path, persistence=False, faults={"remapped_rows_pending": [3]})
    hardware["gpus"][1]["fallen_off_bus"] = True
    host.write_hardware(hardware)
    _, out, _ = run(nvidia_smi, capsys, host, "-r", "-i", "2")  # NVML's GPU 2 is the hardware's GPU 3
    assert out.startswith("GPU 00000000:5D:00.0 was successfully reset.")
    assert host.hardware()["faults"]["remapped_rows"] == {"3": 1}


def test_stale_persistenced_socket_holds_nothing(capsys):
    """persistenced killed with SIGKILL leaves its socket with no listener: no persistence, nothing held."""
    with tempfile.TemporaryDirectory(dir="/tmp") as root:  # short: AF_UNIX paths are at most 107 bytes
        host, _ = nvidia_host(Path(root), persistence=False)
        path = Path(root) / "run/nvidia-persistenced/socket"
        path.parent.mkdir(parents=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen()
        assert host.persistenced_running() and host.persistence_mode()
        listener.close()
        assert path.is_socket() and not host.persistenced_running() and not host.persistence_mode()
