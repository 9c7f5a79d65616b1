"""NVIDIA hosts run exactly the driver their spec names, held in place, with every GPU usable."""

import pytest

from k3ops.deploys.nvidia import driver_packages, fabric_manager_package, package_version
from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
from k3ops.facts.docker import DockerRuntimes
from k3ops.facts.nvidia import (CdiDevices, FabricManager, NvidiaDriverState, NvidiaGpus, NvidiaKernelModule,
                                NvidiaUserspaceVersion)

pytestmark = pytest.mark.applies_to("nvidia")


def test_driver_packages_are_installed_at_the_exact_version(host, spec):
    for package in driver_packages(spec):
        assert host.get_fact(AptPolicyVersion, package=package)["installed"] == package_version(spec), package


def test_driver_packages_are_held(host, spec):
    assert set(driver_packages(spec)) <= set(host.get_fact(AptHeldPackages))


def test_apt_would_not_move_the_driver(host, spec):
    """The pin makes the installed release apt's candidate, whatever newer the repository offers."""
    for package in driver_packages(spec):
        assert host.get_fact(AptPolicyVersion, package=package)["candidate"] == package_version(spec), package


def test_loaded_module_is_the_installed_driver(host, spec):
    assert host.get_fact(NvidiaKernelModule) == {"version": spec.nvidia_driver_version,
                                                 "flavour": spec.nvidia_kernel_modules}
    assert host.get_fact(NvidiaUserspaceVersion) == spec.nvidia_driver_version
    assert host.get_fact(NvidiaDriverState) == "ready"


def test_nvidia_smi_lists_the_gpus_the_inventory_names(host, spec):
    gpus = host.get_fact(NvidiaGpus)
    assert [(gpu["name"], gpu["driver_version"]) for gpu in gpus] == \
        [(spec.gpu_model, spec.nvidia_driver_version)] * spec.gpu_count


def test_persistence_daemon_keeps_the_gpus_initialised(host, spec):
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-persistenced").is_enabled


def test_fabric_manager_runs_at_the_driver_version_only_on_nvswitch_boards(host, spec):
    fabric_manager = host.get_fact(FabricManager)
    if spec.nvswitch_expected:
        assert fabric_manager == {"installed_version": spec.nvidia_driver_version, "active": True}
        assert fabric_manager_package(spec) in host.get_fact(AptHeldPackages)
    else:
        assert fabric_manager["installed_version"] is None


def test_docker_has_the_nvidia_runtime(host, spec):
    """Asked of the running daemon, so a config written but never loaded does not pass."""
    assert host.get_fact(DockerRuntimes)["nvidia"]["path"] == "nvidia-container-runtime"


def test_cdi_spec_lists_every_gpu(host, spec):
    devices = set(host.get_fact(CdiDevices))
    for gpu in host.get_fact(NvidiaGpus):
        assert {f"nvidia.com/gpu={gpu['index']}", f"nvidia.com/gpu={gpu['uuid']}"} <= devices
    assert "nvidia.com/gpu=all" in devices


def test_dcgm_host_engine_runs(host, spec):
    if spec.dcgm:
        assert host.service("nvidia-dcgm").is_running
