"""The GPU host spec refuses bad inventory data with the host, the field and what is allowed."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from k3ops.hardware import CUDA_BY_DRIVER_BRANCH
from k3ops.settings import host_errors
from k3ops.settings.host import GpuHostSpec
from k3ops_lab.sim.host import CUDA_VERSION_BY_BRANCH

H200 = {"hardware_profile": "h200x8", "gpu_vendor": "nvidia", "gpu_model": "NVIDIA H200", "gpu_count": 8}
MI355X = {"hardware_profile": "mi355x8", "gpu_vendor": "amd", "gpu_model": "AMD Instinct MI355X", "gpu_count": 8}


def test_defaults_suit_k3_on_nvidia():
    spec = GpuHostSpec.model_validate(H200)
    assert spec.driver_branch == 580 and spec.nvidia_kernel_modules == "open" and spec.required_cuda == "13.0"
    assert spec.nvswitch_expected
    assert str(spec.repositories["cuda"].url).startswith("https://developer.download.nvidia.com/")


def test_repositories_named_in_data_replace_only_those():
    spec = GpuHostSpec.model_validate({"hardware_profile": "mi300x8", "rocm_release": "6.4.1", "repositories": {
        "rocm": {"url": "http://mirror.example/rocm/apt/{rocm_release}", "key_url": "https://mirror.example/key",
                 "suite": "noble"}}})
    assert spec.repository("rocm").url == "http://mirror.example/rocm/apt/6.4.1"
    assert spec.repository("amdgpu").url == "https://repo.radeon.com/amdgpu/6.4.1/ubuntu"


def test_a_signing_key_comes_over_https_unless_data_allows_plain_http_on_purpose():
    """apt trusts packages by the key, so the key's URL must prove who answers; apt URLs may stay http."""
    data = {"hardware_profile": "h200x8", "repositories": {"cuda": {"url": "http://mirror.example/cuda/",
                                                                    "key_url": "http://mirror.example/key"}}}
    with pytest.raises(ValidationError, match="repositories.cuda.key_url: 'http://mirror.example/key': what this "
                                              "URL serves is trusted, so it must be https"):
        GpuHostSpec.model_validate(data)
    assert GpuHostSpec.model_validate({**data, "allow_plain_http": True}).repositories["cuda"].key_url.startswith("http:")


@pytest.mark.parametrize("change, message", [
    ({"nvidia_driver_version": "570.195.03"},
     "nvidia_driver_version: 570.195.03 is branch 570, which supports CUDA 12.8; the engine needs CUDA 13.0"),
    ({"gpu_count": 4}, "gpu_count: 4 disagrees with hardware_profile 'h200x8', which has 8 GPUs"),
    ({"gpu_model": "NVIDIA H300"}, "gpu_model: unknown GPU model 'NVIDIA H300'; known: "),
    ({"hardware_profile": "h300x8"}, "hardware_profile: unknown hardware profile 'h300x8'; known: "),
    ({"nvidia_driver_version": "580"}, "nvidia_driver_version: '580' is not an exact driver version"),
    ({"nvidia_driver_version": "580.126.09\n"}, "nvidia_driver_version: '580.126.09\\n' is not an exact driver version"),
    ({"gpu_vendor": "amd"}, "gpu_vendor: 'amd' disagrees with hardware_profile 'h200x8' (expected 'nvidia')"),
    ({"hardware_profile": "b300x8", "gpu_model": "NVIDIA B300 SXM6 AC", "nvidia_kernel_modules": "proprietary"},
     "Blackwell GPUs need the open kernel modules"),
    ({"reboot_policy": "sometimes"}, "reboot_policy: Input should be 'allowed' or 'never'"),
    ({"nvidia_kernel_modules": "proprietary", "gpudirect_rdma": "dmabuf"},
     "gpudirect_rdma: 'dmabuf' needs the open kernel modules"),
    ({"nvlink_domain": "rack-07"}, "nvlink_domain: hardware_profile 'h200x8' has no multi-node NVLink"),
    ({"dcgm_version": "4.4"}, "dcgm_version: '4.4' is not a package version like '1:4.4.1-1'"),
    ({"ssh_keepalive_seconds": 90}, "ssh_keepalive_seconds: 90 must be shorter than ssh_lost_after_seconds (60)"),
    ({"ssh_lost_after_seconds": 5}, "ssh_lost_after_seconds: Input should be greater than or equal to 10"),
])
def test_bad_nvidia_data_is_refused_naming_host_and_field(change, message):
    errors = host_errors("gpu-07", {**H200, **change})
    assert any(error.startswith("gpu-07: ") and message in error for error in errors), errors


@pytest.mark.parametrize("data, message", [
    ({**MI355X, "rocm_release": "5.7.1"}, "mi-01: rocm_release: 5.7.1 does not support the AMD Instinct MI355X (CDNA4), "
                                          "which needs ROCm 7.0.0 or newer (e.g. 7.0.2)"),
    ({**MI355X, "rocm_release": "6.4.1"}, "mi-01: rocm_release: 6.4.1 does not support the AMD Instinct MI355X"),
    ({"hardware_profile": "mi300x8", "rocm_release": "5.7.1"},
     "mi-01: rocm_release: 5.7.1 does not support the AMD Instinct MI300X (CDNA3), which needs ROCm 6.0.0 or newer"),
    ({**MI355X, "fabric_manager": "on"}, "mi-01: fabric_manager: 'on' needs NVIDIA GPUs on NVSwitches; "
                                         "hardware_profile 'mi355x8' has AMD Instinct MI355X GPUs (use 'auto' or 'off')"),
    ({"hardware_profile": "cpu", "fabric_manager": "on"}, "mi-01: fabric_manager: 'on' needs NVIDIA GPUs on "
                                                          "NVSwitches; hardware_profile 'cpu' has no GPUs"),
])
def test_a_gpu_stack_the_gpus_cannot_use_is_refused(data, message):
    errors = host_errors("mi-01", data)
    assert any(error.startswith(message) for error in errors), errors


def test_rocm_releases_from_each_architectures_minimum_pass():
    assert host_errors("mi-01", {"hardware_profile": "mi300x8", "rocm_release": "6.0.0"}) == []
    assert host_errors("mi-01", {**MI355X, "rocm_release": "7.0.0"}) == []
    assert host_errors("h-01", {**H200, "fabric_manager": "on"}) == []


OWN_USER = "run the engines as a user of their own, e.g. 'k3ops'"


@pytest.mark.parametrize("user, message", [
    *((user, f"'{user}' is a system account; {OWN_USER}")
      for user in ("root", "daemon", "bin", "nobody", "www-data", "sshd", "messagebus", "systemd-network", "_apt")),
    ("k3ops-peer", f"'k3ops-peer' is k3ops's own peer-copy user, which may do only that; {OWN_USER}"),
    ("k3ops-nccl", f"'k3ops-nccl' is k3ops's own MPI user, which may do only that; {OWN_USER}"),
])
def test_the_engines_never_run_as_root_a_system_account_or_the_peer_user(user, message):
    assert host_errors("gpu-01", {**H200, "service_user": user}) == [f"gpu-01: service_user: {message}"]


def test_a_service_user_of_its_own_passes():
    assert host_errors("gpu-01", {**H200, "service_user": "inference"}) == []


@pytest.mark.parametrize("repository, message", [
    ({"url": "https://mirror.example/cuda' /", "key_url": "https://mirror.example/key"},
     "repositories.cuda.url: \"https://mirror.example/cuda' /\" is not an http(s) URL"),
    ({"url": "https://mirror.example/$(reboot)/", "key_url": "https://mirror.example/key"},
     "repositories.cuda.url: 'https://mirror.example/$(reboot)/' is not an http(s) URL"),
    ({"url": "https://mirror.example/cuda/", "key_url": "https://mirror.example/key\nx"},
     "repositories.cuda.key_url: 'https://mirror.example/key\\nx' is not an http(s) URL"),
    ({"url": "https://mirror.example/cuda/", "key_url": "https://mirror.example/key", "suite": "noble main\ndeb x"},
     "repositories.cuda.suite: 'noble main\\ndeb x' is not an apt suite or component"),
])
def test_repositories_are_refused_when_they_would_change_the_apt_source_line(repository, message):
    errors = host_errors("gpu-01", {**H200, "repositories": {"cuda": repository}})
    assert any(error.startswith(f"gpu-01: {message}") for error in errors), errors


def test_rocm_release_in_the_wrong_form_is_refused():
    errors = host_errors("mi-01", {**MI355X, "rocm_release": "7.0"})
    assert errors == ["mi-01: rocm_release: '7.0' is not a ROCm release like '7.0.2' (major.minor.patch)"]


def test_unknown_keys_are_refused_but_connector_and_global_argument_keys_pass():
    data = {**H200, "nvidia_drvier_version": "580.126.09", "ssh_user": "ops", "_sudo": True}
    assert host_errors("gpu-01", data) == ["gpu-01: nvidia_drvier_version: not a k3ops or pyinfra setting (a typo?)"]


def test_the_gpus_come_from_the_hardware_profile_unless_data_states_them():
    spec = GpuHostSpec.model_validate({"hardware_profile": "mi355x8"})
    assert (spec.gpu_vendor, spec.gpu_model, spec.gpu_count) == ("amd", "AMD Instinct MI355X", 8)
    assert GpuHostSpec.model_validate(MI355X) == spec
    cpu = GpuHostSpec.model_validate({"hardware_profile": "cpu"})
    assert (cpu.gpu_vendor, cpu.gpu_model, cpu.gpu_count) == (None, None, 0)


def test_a_cpu_host_needs_no_gpu_data():
    assert host_errors("cpu-01", {"hardware_profile": "cpu"}) == []
    with pytest.raises(ValidationError):
        GpuHostSpec.model_validate({"hardware_profile": "cpu", "gpu_vendor": "nvidia"})


def test_the_lab_driver_reports_the_cuda_version_the_spec_expects():
    assert {b: CUDA_BY_DRIVER_BRANCH[int(b)] for b in CUDA_VERSION_BY_BRANCH} == CUDA_VERSION_BY_BRANCH


def test_pyinfra_stops_on_bad_group_data_before_connecting(tmp_path):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "group_data").mkdir()
    (tmp_path / "inventory" / "fleet.py").write_text(textwrap.dedent("""
        from k3ops.inventory import validate_inventory

        hgx = ["@fake/gpu-01", ("@fake/gpu-02", {"gpu_count": 4})]
        validate_inventory(__file__)
    """))
    (tmp_path / "group_data" / "hgx.py").write_text(
        'hardware_profile = "h200x8"\ngpu_vendor = "nvidia"\ngpu_count = 8\nnvidia_driver_version = "570.195.03"\n')
    pyinfra = Path(sys.executable).parent / "pyinfra"
    result = subprocess.run([str(pyinfra), "-y", "inventory/fleet.py", "exec", "--", "true"], cwd=tmp_path,
                            capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "@fake/gpu-01: nvidia_driver_version: 570.195.03 is branch 570" in output
    assert "@fake/gpu-02: gpu_count: 4 disagrees with hardware_profile 'h200x8'" in output
    assert "Connecting to hosts" not in output


def test_repository_source_lines_name_their_own_keyring():
    from k3ops.deploys.repositories import source_line

    spec = GpuHostSpec.model_validate({**H200, "docker_source": "vendor"})
    assert source_line("docker", spec.repository("docker")) == (
        "deb [signed-by=/etc/apt/keyrings/k3ops-docker.asc] https://download.docker.com/linux/debian bookworm stable")
    assert source_line("cuda", spec.repository("cuda")) == (
        "deb [signed-by=/etc/apt/keyrings/k3ops-cuda.asc] "
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /")


def test_each_driver_branch_supports_the_cuda_its_release_notes_name():
    """NVIDIA's CUDA toolkit release notes: 12.4 with 550, 12.5 with 555 (555.42.02), 12.6 with 560, ..."""
    from k3ops.hardware import cuda_supported_by

    assert [cuda_supported_by(branch) for branch in (550, 555, 556, 560, 580, 590)] == [
        "12.4", "12.5", "12.5", "12.6", "13.0", "13.1"]
    assert cuda_supported_by(535) is None
