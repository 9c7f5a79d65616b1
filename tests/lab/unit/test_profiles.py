"""Hardware profiles: the document every simulated layer reads."""

import pytest

from k3ops_lab.profiles import PROFILES, get_profile


@pytest.mark.parametrize("name, vendor, count, fabric", [
    ("h200x8", "nvidia", 8, "nvswitch"),
    ("b300x8", "nvidia", 8, "nvswitch"),
    ("gb300x4", "nvidia", 4, "nvlink-domain"),
    ("mi355x8", "amd", 8, "xgmi"),
    ("cpu", None, 0, "none"),
])
def test_profile_describes_its_gpus(name, vendor, count, fabric):
    hardware = get_profile(name).hardware("gpu-01")
    assert hardware["profile"] == name
    assert (hardware["gpu_model"] or {}).get("vendor") == vendor
    assert len(hardware["gpus"]) == count
    assert hardware["fabric"] == fabric


def test_identifiers_are_stable_per_host_and_distinct_between_hosts():
    profile = get_profile("h200x8")
    first, again, other = profile.hardware("gpu-01"), profile.hardware("gpu-01"), profile.hardware("gpu-02")
    assert first == again
    assert first["gpus"][0]["uuid"] != other["gpus"][0]["uuid"]
    assert len({gpu["uuid"] for gpu in first["gpus"]}) == 8
    assert first["gpus"][0]["uuid"].startswith("GPU-")


def test_every_profile_has_one_nvme_device_and_unique_bus_ids():
    for profile in PROFILES.values():
        hardware = profile.hardware("gpu-01", nvme_size_gib=3)
        assert [disk["size_gib"] for disk in hardware["nvme"]] == [3]
        bus_ids = [device["pci_bus_id"] for key in ("gpus", "nvswitches", "nics", "nvme", "pcie_switches")
                   for device in hardware[key]]
        assert len(bus_ids) == len(set(bus_ids)), profile.name


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown hardware profile 'h100x8'.*h200x8.*mi355x8"):
        get_profile("h100x8")
