"""Simulated amd-smi against the real `amd-smi list` and `amd-smi topology` captures, its agreement with
rocm-smi, and the XGMI fact reading its topology."""

import json
import re

import pytest

from k3ops.facts.fabric import XgmiLinks
from k3ops_lab.sim import amd_smi, rocm_smi
from k3ops_lab.sim.host import HARDWARE_DOCUMENT

from ...conftest import real_output
from ..fake_host import amd_host, run

LIST = "amd/amd-smi-list_2gpu_redacted.txt"
TOPOLOGY = "amd/amd-smi-topology_8gpu-xgmi_mi300-class.txt"
TABLE_TITLE = re.compile(r"^(?P<title>[A-Z -]+ TABLE):$")
# amd-smi 26's default topology: the ROCm 6.1 sample's five tables, then the four of ROCm 6.3.
TOPOLOGY_TITLES = ["ACCESS TABLE", "WEIGHT TABLE", "HOPS TABLE", "LINK TYPE TABLE", "NUMA BW TABLE",
                   "CACHE COHERANCY TABLE", "ATOMICS TABLE", "DMA TABLE", "BI-DIRECTIONAL TABLE"]
# What follows the last table's last row: two blank lines, then the legend.
LEGEND = """


Legend:
  SELF = Current GPU
  ENABLED / DISABLED = Link is enabled or disabled
  N/A = Not supported
  T/F = True / False
  C/NC = Coherant / Non-Coherant io links
  64,32 = 64 bit and 32 bit atomic support
  <BW from>-<BW to>
"""
GPU_HEADER = re.compile(r"^GPU: (?P<gpu>\d+)$")
FIELD = re.compile(r"^(?P<indent>(?:    )+)(?P<key>[A-Z0-9_ ]+):(?: (?P<value>.+))?$")
VERSION = re.compile(r"^AMDSMI Tool: (?P<tool>\d+\.\d+\.\d+\+[0-9a-f]{8}) \| AMDSMI Library version: (?P<library>\S+)"
                     r" \| ROCm version: (?P<rocm>\S+)(?: \| amdgpu version: (?P<amdgpu>\S+)"
                     r" \| amd_hsmp version: (?P<hsmp>\S+))?$")


def parse_blocks(text):
    """amd-smi's per-GPU blocks as [(gpu, [(depth, KEY, value)])], parsed the way the real capture reads."""
    blocks = []
    for block in text.strip("\n").split("\n\n"):
        header, *lines = block.split("\n")
        fields = [FIELD.match(line) for line in lines]
        assert all(fields), block
        blocks.append((int(GPU_HEADER.match(header)["gpu"]),
                       [(len(m["indent"]) // 4, m["key"], m["value"]) for m in fields]))
    return blocks


def test_list_has_the_real_block_layout(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    status, out, _ = run(amd_smi, capsys, host, "list")
    assert status == 0 and out.endswith("PARTITION_ID: 0\n\n\n")
    real = parse_blocks(real_output(LIST))
    sim = parse_blocks(out)
    assert [[(depth, key) for depth, key, _ in fields] for _, fields in sim] == \
        [[(depth, key) for depth, key, _ in real[0][1]]] * len(hardware["gpus"])
    first = dict((key, value) for _, key, value in sim[0][1])
    assert first["BDF"] == hardware["gpus"][0]["pci_bus_id"] and first["UUID"] == hardware["gpus"][0]["uuid"]


def test_list_json_carries_the_same_fields(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "list", "--json")
    document = json.loads(out)
    real_keys = [key.lower() for _, key, _ in parse_blocks(real_output(LIST))[0][1]]
    assert [list(entry) for entry in document] == [["gpu", *real_keys]] * len(hardware["gpus"])
    assert [entry["bdf"] for entry in document] == [gpu["pci_bus_id"] for gpu in hardware["gpus"]]


def test_kfd_ids_agree_with_rocm_smi(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "list", "--json")
    listed = {entry["gpu"]: (entry["node_id"], entry["kfd_id"]) for entry in json.loads(out)}
    rocm_smi.main(["--showproductname", "--json"], host)
    products = json.loads(capsys.readouterr().out)
    assert listed == {int(card[4:]): (int(info["Node ID"]), int(info["GUID"])) for card, info in products.items()}


def test_version_line_and_json(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "version")
    line = VERSION.match(out.rstrip("\n"))
    assert line
    assert (line["library"], line["rocm"], line["amdgpu"], line["hsmp"]) == ("26.0.2", "7.0.2", "6.14.14", "N/A")
    assert line["tool"].startswith(line["library"] + "+")
    _, out, _ = run(amd_smi, capsys, host, "version", "--json")
    assert json.loads(out) == [{"tool": "AMDSMI Tool", "version": line["tool"], "amdsmi_library_version": "26.0.2",
                                "rocm_version": "7.0.2", "amdgpu_version": "6.14.14",
                                "amd_hsmp_driver_version": "N/A"}]


def test_firmware_lists_numbered_entries_per_gpu(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "firmware")
    blocks = parse_blocks(out)
    assert [gpu for gpu, _ in blocks] == [gpu["index"] for gpu in hardware["gpus"]]
    fields = blocks[0][1]
    assert fields[0] == (1, "FW_LIST", None)
    assert fields[1:4] == [(2, "FW 0", None), (3, "FW_ID", "CP_MEC1"), (3, "FW_VERSION", "193")]
    versions = {fields[i][2]: fields[i + 1][2] for i in range(len(fields)) if fields[i][1] == "FW_ID"}
    assert re.fullmatch(r"([0-9A-F]{2}\.){3}[0-9A-F]{2}", versions["PSP_SOSDRV"])
    assert re.fullmatch(r"\d{2}\.\d{2}\.\d+\.\d{2}", versions["PM"])
    _, out, _ = run(amd_smi, capsys, host, "firmware", "--json")
    entry = json.loads(out)[0]
    assert entry["gpu"] == 0 and entry["fw_list"][0] == {"fw_id": "CP_MEC1", "fw_version": "193"}


@pytest.mark.parametrize("command", ["list", "version", "firmware", "topology"])
def test_without_amdgpu_it_reports_errors_and_the_bare_version(tmp_path, capsys, command):
    host, _ = amd_host(tmp_path, amdgpu="")
    status, out, err = run(amd_smi, capsys, host, command)
    assert status == 255
    errors = err.splitlines()
    assert len(errors) == 3
    assert errors[0] == "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)"
    line = VERSION.match(out.rstrip("\n"))
    assert line and line["rocm"] == "7.0.2" and line["amdgpu"] is None


def with_hardware(host, hardware, **changes):
    """Rewrite the host's hardware document with `changes` applied (faults, gpu_model, gpus)."""
    hardware.update(changes)
    host.path(HARDWARE_DOCUMENT).write_text(json.dumps(hardware))
    return host


def tables(text):
    """amd-smi's topology tables as {title: [header, row, ...]}, blank lines and the legend left out."""
    found, title = {}, None
    for line in text.splitlines():
        if line == "Legend:":
            break
        if match := TABLE_TITLE.match(line):
            title = match["title"]
            found[title] = []
        elif line and title:
            found[title].append(line)
    return found


def cells(rows, first, second):
    """The cell of GPU `first`'s row under GPU `second`'s column."""
    return rows[1 + first].split()[1 + second]


def test_topology_prints_the_real_capture_for_its_gpus(tmp_path, capsys):
    """MI300-class GPUs at the capture's bus ids: its five tables line for line, then amd-smi 26's four more."""
    host, hardware = amd_host(tmp_path)
    real = tables(real_output(TOPOLOGY))
    bus_ids = real["ACCESS TABLE"][0].split()
    with_hardware(host, hardware, gpu_model={**hardware["gpu_model"], "compute_capability": "gfx942"},
                  gpus=[{**gpu, "pci_bus_id": bus_id} for gpu, bus_id in zip(hardware["gpus"], bus_ids)])
    status, out, _ = run(amd_smi, capsys, host, "topology")
    sim = tables(out)
    assert status == 0 and list(sim) == TOPOLOGY_TITLES
    assert {title: sim[title] for title in real} == real
    assert [cells(sim["ATOMICS TABLE"], 0, peer) for peer in range(8)] == ["SELF"] + ["64,32"] * 7


def test_topology_on_mi355x_is_amd_smi_26s_layout(tmp_path, capsys):
    """Tables back to back, trailing spaces stripped, two blank lines, the legend; MI355X's XGMI figures."""
    host, hardware = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "topology")
    bus_ids = [gpu["pci_bus_id"] for gpu in hardware["gpus"]]
    lines, trailer = out.splitlines(), LEGEND.splitlines()[1:]  # the lines after the last row
    assert lines[:2] == ["ACCESS TABLE:", " " * 12 + " ".join([""] + bus_ids)]
    assert out.endswith("\n0000:f5:00.0 " + "T            " * 7 + "SELF" + LEGEND)
    assert [line for line in lines[:-len(trailer)] if not line or line != line.rstrip()] == []
    assert len(lines) == len(TOPOLOGY_TITLES) * (2 + len(bus_ids)) + len(trailer)
    sim = tables(out)
    assert [row.split()[0] for row in sim["HOPS TABLE"][1:]] == bus_ids
    assert {title: (cells(rows, 2, 2), cells(rows, 2, 6)) for title, rows in sim.items()} == {
        "ACCESS TABLE": ("ENABLED", "ENABLED"), "WEIGHT TABLE": ("0", "0"), "HOPS TABLE": ("0", "1"),
        "LINK TYPE TABLE": ("SELF", "XGMI"), "NUMA BW TABLE": ("N/A", "0-0"), "CACHE COHERANCY TABLE": ("SELF", "C"),
        "ATOMICS TABLE": ("SELF", "64,32"), "DMA TABLE": ("SELF", "T"), "BI-DIRECTIONAL TABLE": ("SELF", "T")}


def test_topology_flags_pick_tables_in_amd_smis_order(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    _, out, _ = run(amd_smi, capsys, host, "topology", "--link-type", "-w")
    assert list(tables(out)) == ["WEIGHT TABLE", "LINK TYPE TABLE"] and out.endswith(LEGEND)
    _, out, _ = run(amd_smi, capsys, host, "topology", "-t")
    assert out.startswith("LINK TYPE TABLE:\n") and list(tables(out)) == ["LINK TYPE TABLE"]


def test_topology_json_lists_each_gpus_links(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    with_hardware(host, hardware, faults={"xgmi_down_links": {"3": [5]}})
    _, out, _ = run(amd_smi, capsys, host, "topology", "--json")
    document = json.loads(out)
    assert [(entry["gpu"], entry["bdf"]) for entry in document] == \
        [(gpu["index"], gpu["pci_bus_id"]) for gpu in hardware["gpus"]]
    assert document[3]["links"][3] == {"gpu": 3, "bdf": hardware["gpus"][3]["pci_bus_id"], "weight": 0,
                                       "link_status": "ENABLED", "link_type": "SELF", "num_hops": 0,
                                       "bandwidth": "N/A", "coherent": "SELF", "atomics": "SELF", "dma": "SELF",
                                       "bi_dir": "SELF"}
    assert {key: document[5]["links"][3][key] for key in ("weight", "link_type", "num_hops", "link_status")} == \
        {"weight": 40, "link_type": "PCIE", "num_hops": 2, "link_status": "DISABLED"}
    _, out, _ = run(amd_smi, capsys, host, "topology", "-a", "-t", "--json")
    assert list(json.loads(out)[0]["links"][1]) == ["gpu", "bdf", "link_status", "link_type"]


def test_a_down_xgmi_link_is_a_pcie_path_both_ways(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    with_hardware(host, hardware, faults={"xgmi_down_links": {"3": [5]}})
    _, out, _ = run(amd_smi, capsys, host, "topology")
    sim = tables(out)
    for first, second in ((3, 5), (5, 3)):
        assert [cells(rows, first, second) for rows in sim.values()] == \
            ["DISABLED", "40", "2", "PCIE", "N/A", "N/A", "N/A", "N/A", "N/A"]
    assert [cells(sim["LINK TYPE TABLE"], 3, peer) for peer in range(8)] == \
        ["XGMI"] * 3 + ["SELF", "XGMI", "PCIE", "XGMI", "XGMI"]
    assert sum(row.count("PCIE") for row in sim["LINK TYPE TABLE"]) == 2


def test_xgmi_links_fact_reads_the_simulated_topology(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    command = XgmiLinks().command
    assert command == "amd-smi topology -t 2>/dev/null || true"
    arguments = command.split(" 2>")[0].split()[1:]
    _, out, _ = run(amd_smi, capsys, host, *arguments)
    bus_ids = [gpu["pci_bus_id"] for gpu in hardware["gpus"]]
    assert XgmiLinks().process(out.splitlines()) == {"gpus": bus_ids, "not_xgmi": []}
    with_hardware(host, hardware, faults={"xgmi_down_links": {"3": [5]}})
    _, out, _ = run(amd_smi, capsys, host, *arguments)
    assert XgmiLinks().process(out.splitlines()) == {"gpus": bus_ids, "not_xgmi": [[3, 5, "PCIE"]]}
    _, out, _ = run(amd_smi, capsys, host, "topology")
    assert XgmiLinks().process(out.splitlines()) == {"gpus": bus_ids, "not_xgmi": [[3, 5, "PCIE"]]}
