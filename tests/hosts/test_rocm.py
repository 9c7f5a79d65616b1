"""AMD hosts run the ROCm release their spec names, with the driver held and every GPU visible."""

import pytest

from k3ops.hardware import AMD_KERNEL_ARGUMENTS
from k3ops.facts.amd import AmdgpuModule, RocmGpus, RocmVersion
from k3ops.onhost.drivers import amdgpu_differs
from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
from k3ops.facts.boot import KernelCommandLine

pytestmark = pytest.mark.applies_to("amd")


def test_rocm_is_the_release_the_inventory_names(host, spec):
    assert host.get_fact(RocmVersion).startswith(f"{spec.rocm_release}-")


def test_amdgpu_driver_is_held_and_loaded(host, spec):
    """Loaded at the build installed: one installed by a deploy that never got to its reboot is not."""
    assert "amdgpu-dkms" in host.get_fact(AptHeldPackages)
    loaded = host.get_fact(AmdgpuModule)
    assert loaded is not None
    assert not amdgpu_differs(loaded, host.get_fact(AptPolicyVersion, package="amdgpu-dkms")["installed"])
    assert host.run("test -c /dev/kfd").rc == 0


def test_rocm_smi_lists_the_gpus_the_inventory_names(host, spec):
    assert [gpu["product"] for gpu in host.get_fact(RocmGpus)] == [spec.gpu_model] * spec.gpu_count


def test_booted_with_the_kernel_arguments_amd_asks_for(host, spec):
    """The running kernel's command line, not only GRUB's file: the host has rebooted onto them."""
    assert set(AMD_KERNEL_ARGUMENTS) <= set(host.get_fact(KernelCommandLine))


def test_service_user_can_reach_the_gpus(host, spec):
    user = host.user(spec.service_user)
    assert user.exists
    assert {"render", "video"} <= set(user.groups)
