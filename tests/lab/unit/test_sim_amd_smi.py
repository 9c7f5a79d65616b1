"""Simulated amd-smi against the real `amd-smi list` capture, and its agreement with rocm-smi."""

import json
import re

import pytest

from k3ops.lab.sim import amd_smi, rocm_smi

from ...conftest import real_output
from ..fake_host import amd_host, run

LIST = "amd/amd-smi-list_2gpu_redacted.txt"
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


@pytest.mark.parametrize("command", ["list", "version", "firmware"])
def test_without_amdgpu_it_reports_errors_and_the_bare_version(tmp_path, capsys, command):
    host, _ = amd_host(tmp_path, amdgpu="")
    status, out, err = run(amd_smi, capsys, host, command)
    assert status == 255
    errors = err.splitlines()
    assert len(errors) == 3
    assert errors[0] == "ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in modules)"
    line = VERSION.match(out.rstrip("\n"))
    assert line and line["rocm"] == "7.0.2" and line["amdgpu"] is None
