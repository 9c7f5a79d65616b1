"""What the NVIDIA and base deploys decide from a host's spec and facts, before any command: fabric
manager, the NVLink fabric's packages, GPUDirect RDMA, and the kernel headers DKMS needs."""

import pytest

from k3ops.deploys.base import kernel_headers
from k3ops.hardware import kernel_supports_dmabuf
from k3ops.deploys.nvlink import fabric_packages
from k3ops.settings.host import GpuHostSpec

H200, B300, GB300 = ({"hardware_profile": profile} for profile in ("h200x8", "b300x8", "gb300x4"))


@pytest.mark.parametrize("data, switches_on_pci, wanted", [
    (H200, True, True),
    ({**H200, "fabric_manager": "off"}, True, False),
    (B300, False, True),  # NVLink 5 switch trays do not show on PCI: the board speaks for them
    ({**B300, "fabric_manager": "off"}, False, False),
    (GB300, False, False),
    ({**GB300, "fabric_manager": "on"}, False, True),
])
def test_fabric_manager_follows_data_then_the_board(data, switches_on_pci, wanted):
    assert GpuHostSpec.model_validate(data).fabric_manager_wanted(switches_on_pci) is wanted


@pytest.mark.parametrize("data, fabric_manager, names", [
    (H200, True, ["nvidia-fabricmanager"]),
    (B300, True, ["nvidia-fabricmanager", "nvlsm"]),
    (B300, False, []),
    (GB300, False, ["nvidia-imex"]),
    ({**H200, "nvidia_driver_version": "590.44.01", "required_cuda": "13.1"}, True, ["nvidia-fabricmanager"]),
])
def test_the_nvlink_fabric_packages_move_with_the_driver(data, fabric_manager, names):
    assert fabric_packages(GpuHostSpec.model_validate(data), fabric_manager) == names


@pytest.mark.parametrize("setting, nics, mode", [
    ("auto", ["0000:19:00.0"], "peermem"),
    ("auto", [], "off"),
    ("dmabuf", ["0000:19:00.0"], "dmabuf"),
    ("peermem", [], "peermem"),
    ("off", ["0000:19:00.0"], "off"),
])
def test_gpudirect_rdma_where_the_host_has_rdma_nics(setting, nics, mode):
    assert GpuHostSpec.model_validate({**H200, "gpudirect_rdma": setting}).gpudirect_mode(nics) == mode


@pytest.mark.parametrize("release, supported", [("5.11.22", False), ("5.12.0-1-amd64", True),
                                                ("6.1.0-28-amd64", True), ("4.18.0-553.el8", False)])
def test_dmabuf_needs_linux_5_12(release, supported):
    assert kernel_supports_dmabuf(release) is supported


def test_headers_for_every_installed_kernel_and_the_flavours_next():
    installed = {"releases": ["6.1.0-27-amd64", "6.1.0-28-amd64"], "flavours": ["amd64"]}
    assert kernel_headers("6.1.0-27-amd64", installed) == [
        "linux-headers-6.1.0-27-amd64", "linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]


def test_a_kernel_apt_does_not_know_still_gets_its_headers():
    assert kernel_headers("6.18.44-custom", {"releases": [], "flavours": []}) == ["linux-headers-6.18.44-custom"]
