"""AMD hosts run the ROCm release their spec names, with the driver held and every GPU visible."""

import json

import pytest

pytestmark = pytest.mark.applies_to("amd")


def test_rocm_is_the_release_the_inventory_names(host, spec):
    assert host.file("/opt/rocm/.info/version").content_string.startswith(f"{spec.rocm_release}-")


def test_amdgpu_driver_is_held_and_loaded(host, spec):
    assert "amdgpu-dkms" in host.check_output("apt-mark showhold").split()
    assert host.file("/sys/module/amdgpu/version").exists
    assert host.run("test -c /dev/kfd").rc == 0


def test_rocm_smi_lists_the_gpus_the_inventory_names(host, spec):
    cards = json.loads(host.check_output("rocm-smi --showproductname --json"))
    products = [card.get("Card Series") or card.get("Card series") for name, card in cards.items()
                if name.startswith("card")]
    assert products == [spec.gpu_model] * spec.gpu_count


def test_iommu_is_in_pass_through_mode(host, spec):
    assert "iommu=pt" in host.file("/proc/cmdline").content_string.split()


def test_service_user_can_reach_the_gpus(host, spec):
    user = host.user(spec.service_user)
    assert user.exists
    assert {"render", "video"} <= set(user.groups)
