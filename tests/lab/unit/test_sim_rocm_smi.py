"""Simulated rocm-smi against real captures: the ROCm 7 concise table, log sections and JSON keys."""

import json
import re

import pytest

from k3ops_lab.sim import rocm_smi

from ...conftest import real_output
from ..fake_host import amd_host, run

CONCISE = "amd/rocm-smi_mi355x-x8_concise_rocm7.txt"
SHOW_ALL = "amd/rocm-smi-a_mi300x-x4_gls.txt"
TELEGRAF_JSON = "amd/rocm-smi-json_mi100-x4_rocm-6.0.2_telegraf.txt"
ANSI = re.compile(r"\033\[[0-9;]*m")
GPU_LINE = re.compile(r"^GPU\[(?P<device>\d+)\]\t\t: (?P<metric>[^:]+): (?P<value>.*)$")
DRIVER_LINE = re.compile(r"^Driver version: (?P<version>\S+)$")
# One pattern per concise column (IDs holds DID and GUID), written against the real capture.
CONCISE_CELLS = [r"\d+", r"\d+", r"0x[0-9a-f]{4}, +\d+", r"\d+\.\d\N{DEGREE SIGN}C", r"\d+\.\dW",
                 r"NPS\d, [SDQC]PX, \d", r"\d+Mhz", r"\d+Mhz", r"\d+%", r"auto", r"\d+\.\dW", r"\d+%", r"\d+%"]


def concise_cells(row, header_line):
    """Cut a concise row at the header's column starts, as a parser of the real table would."""
    starts = [match.start() for match in re.finditer(r"\S+", header_line)]
    return [row[start:end].strip() for start, end in zip(starts, starts[1:] + [None], strict=True)]


def test_concise_table_has_the_real_frame_and_columns(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    status, out, _ = run(rocm_smi, capsys, host)
    assert status == 0
    assert out.startswith("\n\n")  # rocm-smi prints print('\n') before every report
    sim = ANSI.sub("", out).strip("\n").split("\n")
    real = real_output(CONCISE).rstrip("\n").split("\n")
    assert len(sim) == len(real)
    frame = [0, 1, 2, 3, 4, len(real) - 2, len(real) - 1]
    assert [sim[i] for i in frame] == [real[i] for i in frame]
    for sim_row, real_row in zip(sim[5:-2], real[5:-2], strict=True):
        assert len(sim_row) == len(real_row)
        for table_row in (sim_row, real_row):
            cells = concise_cells(table_row, real[2])
            assert all(re.fullmatch(pattern, cell) for pattern, cell in zip(CONCISE_CELLS, cells, strict=True))
    rows = [concise_cells(row, real[2]) for row in sim[5:-2]]
    assert [int(cells[0]) for cells in rows] == [gpu["index"] for gpu in hardware["gpus"]]
    assert {cells[10] for cells in rows} == {"1400.0W"}


def test_concise_subheader_is_printed_in_italics(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    _, out, _ = run(rocm_smi, capsys, host)
    subheader = out.strip("\n").split("\n")[3]
    assert subheader.startswith("\033[3m") and subheader.endswith("\033[0m")


def test_concise_refuses_json(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    assert run(rocm_smi, capsys, host, "--json")[:2] == (1, "NOT_SUPPORTED: Cannot print JSON/CSV output for concise output\n")


def real_section(title):
    """A section of the real `rocm-smi -a` capture: its spacer line and the lines up to the next spacer."""
    lines = real_output(SHOW_ALL).split("\n")
    start = next(i for i, line in enumerate(lines) if title in line and line.startswith("="))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("="))
    return lines[start], lines[start + 1:end]


def test_showbus_matches_the_real_section(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    _, out, _ = run(rocm_smi, capsys, host, "--showbus")
    lines = out.split("\n")
    real_spacer, real_lines = real_section(" PCI Bus ID ")
    real_header = real_output(SHOW_ALL).split("\n")[2]
    real_footer = real_output(SHOW_ALL).rstrip("\n").split("\n")[-1]
    assert lines[:4] == ["", "", real_header, real_spacer]
    assert lines[-3:] == ["=" * 90, real_footer, ""]
    assert all(GPU_LINE.match(line)["metric"] == "PCI Bus" for line in real_lines)
    parsed = [GPU_LINE.match(line) for line in lines[4:-3]]
    assert [(int(m["device"]), m["value"]) for m in parsed] == [
        (gpu["index"], gpu["pci_bus_id"].upper()) for gpu in hardware["gpus"]]


def test_showbus_json_uses_the_real_key(tmp_path, capsys):
    host, hardware = amd_host(tmp_path)
    _, out, _ = run(rocm_smi, capsys, host, "--showbus", "--json")
    document = json.loads(out)
    telegraf = json.loads(real_output(TELEGRAF_JSON))
    assert "PCI Bus" in telegraf["card0"]
    assert document == {f"card{gpu['index']}": {"PCI Bus": gpu["pci_bus_id"].upper()} for gpu in hardware["gpus"]}


def test_productname_on_rocm_6_0_matches_the_real_text_and_json(tmp_path, capsys):
    host, _ = amd_host(tmp_path, rocm="6.0.2-115")
    _, out, _ = run(rocm_smi, capsys, host, "--showproductname")
    real_spacer, real_lines = real_section(" Product Info ")
    real_metrics = [GPU_LINE.match(line)["metric"] for line in real_lines if line.startswith("GPU[0]")]
    lines = out.split("\n")
    assert lines[3] == real_spacer
    sim_metrics = [GPU_LINE.match(line)["metric"] for line in lines[4:-3] if line.startswith("GPU[0]")]
    assert sim_metrics == real_metrics
    assert all(GPU_LINE.match(line)["value"].startswith("\t\t") for line in lines[4:-3])

    _, out, _ = run(rocm_smi, capsys, host, "--showproductname", "--json")
    telegraf_card = json.loads(real_output(TELEGRAF_JSON))["card0"]
    card = json.loads(out)["card0"]
    assert set(card) <= set(telegraf_card)
    assert card == {"Card series": "AMD Instinct MI355X", "Card model": "0x75a3",
                    "Card vendor": telegraf_card["Card vendor"], "Card SKU": "M3550101"}


def test_productname_on_rocm_7_uses_the_renamed_fields(tmp_path, capsys):
    host, _ = amd_host(tmp_path)
    _, out, _ = run(rocm_smi, capsys, host, "--showproductname", "--json")
    card = json.loads(out)["card3"]
    assert list(card) == ["Card Series", "Card Model", "Card Vendor", "Card SKU", "Subsystem ID", "Device Rev",
                          "Node ID", "GUID", "GFX Version"]
    assert card["GFX Version"] == "gfx950" and card["Node ID"] == "5"


def test_driver_version_section_and_json(tmp_path, capsys):
    host, _ = amd_host(tmp_path, amdgpu="6.12.12")
    _, out, _ = run(rocm_smi, capsys, host, "--showdriverversion")
    real_spacer, real_lines = real_section(" Version of System Component ")
    lines = out.split("\n")
    assert lines[3] == real_spacer and DRIVER_LINE.match(real_lines[0])
    assert DRIVER_LINE.match(lines[4])["version"] == "6.12.12"
    _, out, _ = run(rocm_smi, capsys, host, "--showdriverversion", "--json")
    assert json.loads(out) == {"system": {"Driver version": "6.12.12"}}


@pytest.mark.parametrize("args", [[], ["--showbus", "--json"], ["--showproductname"]])
def test_without_amdgpu_it_logs_an_error_and_exits_zero(tmp_path, capsys, args):
    host, _ = amd_host(tmp_path, amdgpu="")
    assert run(rocm_smi, capsys, host, *args) == (0, "", "ERROR:root:Driver not initialized (amdgpu not found in modules)\n")


def test_the_loglevel_rocms_cluster_validation_suite_passes_changes_no_report(tmp_path, capsys):
    """ROCm CVS runs `rocm-smi --loglevel error ...`: the program's own logging, not what it reports."""
    host, _ = amd_host(tmp_path)
    for args in ((), ("--showbus",), ("--showbus", "--json")):
        status, plain, _ = run(rocm_smi, capsys, host, *args)
        assert (status, run(rocm_smi, capsys, host, "--loglevel", "error", *args)) == (0, (0, plain, ""))
    with pytest.raises(SystemExit):
        rocm_smi.main(["--loglevel", "loud"], host)
