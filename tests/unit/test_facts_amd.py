"""The AMD facts on real captured rocm-smi JSON, and on what the lab's AMD hosts hold."""

import pytest

from k3ops.facts.amd import AmdgpuModule, RocmGpus, RocmVersion, amdgpu_release
from k3ops.onhost.drivers import amdgpu_differs
from k3ops_lab.sim import rocm_smi
from k3ops_lab.sim.host import AMDGPU_MODULE_VERSION, ROCM_VERSION_FILE

from ..conftest import real_output
from .fact_commands import tool_arguments
from ..lab.fake_host import amd_host, run

TELEGRAF_JSON = "amd/rocm-smi-json_mi100-x4_rocm-6.0.2_telegraf.txt"


def test_gpus_from_the_real_mi100_json():
    # telegraf asked for many more fields; the product and bus fields are the ones this fact's flags print.
    gpus = RocmGpus().process(real_output(TELEGRAF_JSON).splitlines())
    assert gpus == [
        {"card": card, "bus_id": bus_id, "product": "Arcturus GL-XL [Instinct MI100]"}
        for card, bus_id in enumerate(["0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0"])
    ]


@pytest.mark.parametrize("rocm", ["7.0.2-56", "6.0.2-115"])
def test_gpus_are_the_ones_amdgpu_enumerated(tmp_path, capsys, rocm):
    host, hardware = amd_host(tmp_path, rocm=rocm)
    _, out, _ = run(rocm_smi, capsys, host, *tool_arguments(RocmGpus))
    assert RocmGpus().process(out.splitlines()) == [
        {"card": card, "bus_id": gpu["pci_bus_id"], "product": hardware["gpu_model"]["name"]}
        for card, gpu in enumerate(hardware["gpus"])
    ]


def test_no_gpus_without_amdgpu(tmp_path, capsys):
    host, _ = amd_host(tmp_path, amdgpu="")
    _, out, _ = run(rocm_smi, capsys, host, *tool_arguments(RocmGpus))
    assert RocmGpus().process(out.splitlines()) == []


@pytest.mark.parametrize("fact, path, version", [
    (AmdgpuModule, AMDGPU_MODULE_VERSION, "6.14.14"),
    (RocmVersion, ROCM_VERSION_FILE, "7.0.2-56"),
])
def test_versions_are_read_from_the_files_amd_installs(tmp_path, fact, path, version):
    amd_host(tmp_path, rocm="7.0.2-56", amdgpu="6.14.14")
    assert f"/{path} " in fact.command
    assert fact().process((tmp_path / path).read_text().splitlines()) == version


@pytest.mark.parametrize(("loaded", "installed", "differs"), [
    ("6.14.14", "1:6.14.14.70002-2187269.24.04", False),  # the build installed, loaded
    ("6.12.12", "1:6.14.14.70002-2187269.24.04", True),  # installed by a deploy that never rebooted
    ("6.14.1", "1:6.14.14.70002-2187269.24.04", True),  # a prefix of the build is not the build
    ("6.14.14", None, False),  # nothing installed: nothing to compare (the doctor and the deploy see it otherwise)
    (None, "1:6.14.14.70002-2187269.24.04", False),  # not loaded: amdgpu-not-loaded, not a mismatch
])
def test_a_loaded_amdgpu_differs_from_the_installed_package_only_when_another_build(loaded, installed, differs):
    assert amdgpu_differs(loaded, installed) is differs


@pytest.mark.parametrize(("loaded", "installed", "release"), [
    ("6.14.14", "1:6.14.14.70002-2187269.24.04", "7.0.2"),
    ("6.12.12", "1:6.12.12.60401-2164967.24.04", "6.4.1"),
    ("6.10.5", "1:6.10.5.61000-2100000.24.04", "6.10.0"),  # two-digit minor releases
    ("6.12.12", "1:6.14.14.70002-2187269.24.04", None),  # moved on disk, the kernel still runs the last one
    (None, "1:6.14.14.70002-2187269.24.04", None),
    ("6.14.14", None, None),
])
def test_the_release_a_host_runs_is_the_installed_amdgpu_dkms_once_the_kernel_loads_it(loaded, installed, release):
    assert amdgpu_release(loaded, installed) == release
