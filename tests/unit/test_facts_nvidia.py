"""The NVIDIA facts on real captured output, and on the lab's simulated tools where nothing real was captured."""

import csv
import os
import shutil
import subprocess

import pytest
from pyinfra.api.exceptions import FactProcessError

from k3ops.facts.nvidia import (
    GPU_QUERY_FIELDS,
    CdiDevices,
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaKernelModule,
    NvidiaUserspaceVersion,
    NvSwitches,
)
from k3ops.facts.util import PCI_DEVICES
from k3ops_lab.profiles import PROFILES
from k3ops_lab.sim import boot, nvidia_ctk, nvidia_smi
from k3ops_lab.sim.host import NVML_LIBRARY
from k3ops_lab.sim.sysfs import write_sysfs

from ..conftest import real_output
from .fact_commands import tool_arguments
from ..lab.fake_host import bare_host, freeze_clock, nvidia_host, run

ALL_FIELDS_CSV = "query-gpu-csv/h100-x1_590.48.01_all-fields_csv-with-header_load.txt"
MISMATCH = "driver-mismatch/nvidia-smi_nvml-mismatch_classic.txt"


@pytest.fixture(autouse=True)
def _frozen(monkeypatch):
    freeze_clock(monkeypatch)


def lines(text):
    return text.splitlines()


def as_noheader_nounits(capture, fields):
    """What nvidia-smi prints for `fields` with --format=csv,noheader,nounits, cut from a real capture of
    every field with --format=csv: the same values, without the header line and the units after values."""
    header, *rows = csv.reader(capture.splitlines(), skipinitialspace=True)
    columns = {name.split(" [")[0]: (position, name.partition(" [")[2].rstrip("]")) for position, name in
               enumerate(header)}
    return [", ".join(row[columns[field][0]].removesuffix(f" {columns[field][1]}") for field in fields.split(","))
            for row in rows]


def test_gpus_from_the_real_h100_capture():
    output = as_noheader_nounits(real_output(ALL_FIELDS_CSV), GPU_QUERY_FIELDS)
    assert NvidiaGpus().process(output) == [{
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "bus_id": "00000000:00:09.0", "driver_version": "590.48.01", "memory_total_mib": 81559,
        "persistence_mode": True,
    }]


@pytest.mark.parametrize("profile, persistence", [("h200x8", True), ("gb300x4", False), ("b300x8", True)])
def test_gpus_are_the_ones_the_driver_reaches(tmp_path, capsys, profile, persistence):
    host, hardware = nvidia_host(tmp_path, profile=profile, persistence=persistence)
    _, out, _ = run(nvidia_smi, capsys, host, *tool_arguments(NvidiaGpus))
    gpus = NvidiaGpus().process(lines(out))
    # nvidia-smi spells bus ids with an 8-digit domain in upper case: 00000000:18:00.0.
    assert [(gpu["index"], gpu["uuid"], gpu["bus_id"].lower()[4:]) for gpu in gpus] == [
        (index, gpu["uuid"], gpu["pci_bus_id"])
        for index, gpu in enumerate(sorted(hardware["gpus"], key=lambda gpu: gpu["pci_bus_id"]))]
    assert {(gpu["name"], gpu["persistence_mode"]) for gpu in gpus} == {(hardware["gpu_model"]["name"], persistence)}


def test_the_real_version_mismatch_lists_no_gpu_and_says_mismatch():
    output = lines(real_output(MISMATCH))
    assert NvidiaGpus().process(output) == []
    assert NvidiaDriverState().process(output) == "mismatch"


@pytest.mark.parametrize("changes, state", [
    ({}, "ready"),
    ({"module": None}, "no-driver"),
    ({"driver": "580.126.09"}, "mismatch"),
    ({"profile": "cpu"}, "no-devices"),
])
def test_driver_state_tells_why_no_gpu_is_listed(tmp_path, capsys, changes, state):
    host, _ = nvidia_host(tmp_path, **changes)
    _, out, _ = run(nvidia_smi, capsys, host, *tool_arguments(NvidiaDriverState))
    assert NvidiaDriverState().process(lines(out)) == state
    _, out, _ = run(nvidia_smi, capsys, host, *tool_arguments(NvidiaGpus))
    assert (NvidiaGpus().process(lines(out)) != []) == (state == "ready")


def test_driver_state_refuses_an_answer_it_does_not_know():
    with pytest.raises(FactProcessError, match="Unable to determine the device handle"):
        NvidiaDriverState().process(["Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"])


@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_kernel_module_is_what_the_boot_layer_loaded(tmp_path, flavour):
    host, _ = bare_host(tmp_path, staged_modules={"nvidia": {"version": "580.105.08", "flavour": flavour}})
    boot.load_kernel_modules(host)
    # What `cat version taint` prints.
    output = lines("".join((tmp_path / "sys/module/nvidia" / name).read_text() for name in ("version", "taint")))
    assert NvidiaKernelModule().process(output) == {"version": "580.105.08", "flavour": flavour}


def test_userspace_version_is_the_nvml_library_behind_the_link(tmp_path):
    nvidia_host(tmp_path, driver="580.126.09", module="580.105.08")
    resolved = os.path.realpath(tmp_path / NVML_LIBRARY)  # readlink -e
    assert NvidiaUserspaceVersion().process(["/" + os.path.relpath(resolved, tmp_path)]) == "580.126.09"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_nvswitches_are_found_in_the_sysfs_real_lspci_reads(tmp_path, profile):
    """The fact's own shell walk over a sysfs tree, the one the lab's hosts show lspci."""
    hardware = PROFILES[profile].hardware("gpu-01")
    write_sysfs(hardware, tmp_path / "sys")
    command = NvSwitches.command.replace(PCI_DEVICES, f"{tmp_path}/sys/bus/pci/devices")
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    assert NvSwitches().process(lines(output)) == sorted(switch["pci_bus_id"] for switch in hardware["nvswitches"])


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils is not installed")
def test_the_sysfs_walk_finds_what_lspci_finds(tmp_path):
    hardware = PROFILES["h200x8"].hardware("gpu-01")
    write_sysfs(hardware, tmp_path / "sys")
    listed = subprocess.run(["lspci", "-A", "linux-sysfs", "-O", f"sysfs.path={tmp_path}/sys/bus/pci", "-D", "-n",
                             "-d", "10de::0680"], capture_output=True, text=True, check=True).stdout
    command = NvSwitches.command.replace(PCI_DEVICES, f"{tmp_path}/sys/bus/pci/devices")
    walked = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    assert NvSwitches().process(lines(walked)) == sorted(line.split()[0] for line in listed.splitlines()) != []


def test_cdi_devices_name_every_gpu_by_index_and_uuid(tmp_path, capsys):
    host, hardware = nvidia_host(tmp_path, toolkit="1.18.0")
    run(nvidia_ctk, capsys, host, "cdi", "generate", "--output=/etc/cdi/nvidia.yaml")
    _, out, _ = run(nvidia_ctk, capsys, host, *tool_arguments(CdiDevices))
    devices = CdiDevices().process(lines(out))
    gpus = sorted(hardware["gpus"], key=lambda gpu: gpu["pci_bus_id"])
    assert sorted(devices) == sorted(
        [f"nvidia.com/gpu={index}" for index in range(len(gpus))]
        + [f"nvidia.com/gpu={gpu['uuid']}" for gpu in gpus] + ["nvidia.com/gpu=all"])

