"""NVIDIA hosts run exactly the driver their spec names, held in place, with every GPU usable."""

import json

import pytest

from k3ops.deploys.nvidia import driver_packages, fabric_manager_package

pytestmark = pytest.mark.applies_to("nvidia")


def installed_version(host, package: str) -> str | None:
    result = host.run("dpkg-query -W -f '${Status} ${Version}' %s", package)
    status, _, version = result.stdout.rpartition(" ")
    # "install ok installed", or "hold ok installed" once held
    return version if result.rc == 0 and status.endswith(" ok installed") else None


def test_driver_packages_are_installed_at_the_exact_version(host, spec):
    for package in driver_packages(spec):
        assert installed_version(host, package) == f"{spec.nvidia_driver_version}-1", package


def test_driver_packages_are_held(host, spec):
    held = set(host.check_output("apt-mark showhold").split())
    assert set(driver_packages(spec)) <= held


def test_apt_would_not_move_the_driver(host, spec):
    """The pin makes the installed release apt's candidate, whatever newer the repository offers."""
    for package in driver_packages(spec):
        policy = host.check_output("apt-cache policy %s", package)
        candidate = next(line.split()[1] for line in policy.splitlines() if line.strip().startswith("Candidate:"))
        assert candidate == f"{spec.nvidia_driver_version}-1", package


def test_loaded_module_is_the_installed_driver(host, spec):
    assert host.file("/sys/module/nvidia/version").content_string.strip() == spec.nvidia_driver_version
    taint = host.file("/sys/module/nvidia/taint").content_string
    assert ("P" in taint) == (spec.nvidia_kernel_modules == "proprietary")


def test_nvidia_smi_lists_the_gpus_the_inventory_names(host, spec):
    rows = host.check_output("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader").splitlines()
    assert rows == [f"{spec.gpu_model}, {spec.nvidia_driver_version}"] * spec.gpu_count


def test_persistence_daemon_keeps_the_gpus_initialised(host, spec):
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-persistenced").is_enabled


def test_fabric_manager_runs_at_the_driver_version_only_on_nvswitch_boards(host, spec):
    package = fabric_manager_package(spec)
    if spec.nvswitch_expected:
        assert installed_version(host, package) == f"{spec.nvidia_driver_version}-1"
        assert host.service("nvidia-fabricmanager").is_running
        assert package in host.check_output("apt-mark showhold").split()
    else:
        assert installed_version(host, package) is None


def test_docker_has_the_nvidia_runtime(host, spec):
    """Asked of the running daemon, so a config written but never loaded does not pass."""
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"


def test_cdi_spec_lists_every_gpu(host, spec):
    devices = set(host.check_output("nvidia-ctk cdi list").split())
    gpus = host.check_output("nvidia-smi --query-gpu=index,uuid --format=csv,noheader").splitlines()
    for index, uuid in (line.split(", ") for line in gpus):
        assert {f"nvidia.com/gpu={index}", f"nvidia.com/gpu={uuid}"} <= devices
    assert "nvidia.com/gpu=all" in devices


def test_dcgm_host_engine_runs(host, spec):
    if spec.dcgm:
        assert host.service("nvidia-dcgm").is_running
