"""The model spec: pinned revisions only, and bad model data named by host and field."""

import pytest

from k3ops.deploys.checkpoint import fan_out_sources
from k3ops.spec import host_errors
from k3ops.spec.model import ModelHostSpec

CPU = {"hardware_profile": "cpu", "gpu_count": 0}
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}


def test_a_pinned_model_passes():
    assert host_errors("gpu-01", {**CPU, "model": MODEL}) == []


@pytest.mark.parametrize("change, message", [
    ({"revision": "main"}, "gpu-01: model.revision: 'main' is not a commit sha: pin the full 40-hex commit"),
    ({"revision": "0123456"}, "gpu-01: model.revision: '0123456' is not a commit sha"),
    ({"revision": "0123456789ABCDEF0123456789ABCDEF01234567"}, "gpu-01: model.revision: "),
    ({"repo_id": "Kimi-K3"}, "gpu-01: model.repo_id: String should match pattern"),
    ({"name": "Kimi K3"}, "gpu-01: model.name: String should match pattern"),
    ({"rollback_depth": 9}, "gpu-01: model.rollback_depth: Input should be less than or equal to 5"),
    ({"revison": "x"}, "gpu-01: model.revison: Extra inputs are not permitted"),
])
def test_bad_model_data_names_host_and_field(change, message):
    errors = host_errors("gpu-01", {**CPU, "model": {**MODEL, **change}})
    assert any(error.startswith(message) for error in errors), errors


@pytest.mark.parametrize("data, message", [
    ({"model_cache_path": "relative/path"}, "gpu-01: model_cache_path: String should match pattern"),
    ({"model_cache_wipe": ["nvme1n1"]}, "gpu-01: model_cache_wipe: 'nvme1n1' is not a device path"),
    ({"nvme_devices": ["nvme0n1"]}, "gpu-01: nvme_devices: 'nvme0n1' is not a device path"),
    ({"model_source": "bittorrent"}, "gpu-01: model_source: Input should be 'peers' or 'hub'"),
    ({"hf_endpoint": "huggingface.co"}, "gpu-01: hf_endpoint: String should match pattern"),
])
def test_bad_cache_data_names_host_and_field(data, message):
    errors = host_errors("gpu-01", {**CPU, "model": MODEL, **data})
    assert any(error.startswith(message) for error in errors), errors


@pytest.mark.parametrize("data, address", [
    ({"peer_address": "10.1.0.7", "ssh_hostname": "192.0.2.7"}, "10.1.0.7"),
    ({"ssh_hostname": "192.0.2.7"}, "192.0.2.7"),
    ({}, "gpu-07"),
])
def test_peers_reach_a_host_on_its_peer_address_else_where_ssh_does(data, address):
    assert ModelHostSpec.model_validate(data).address_for_peers("gpu-07") == address


def test_fan_out_is_a_binary_tree_rooted_at_the_first_host():
    fleet = [(f"gpu-{i:02d}", f"10.0.0.{i}") for i in range(1, 8)]
    assert fan_out_sources("gpu-01", fleet) == []
    assert fan_out_sources("gpu-02", fleet) == ["10.0.0.1"]
    assert fan_out_sources("gpu-03", fleet) == ["10.0.0.1"]
    assert fan_out_sources("gpu-04", fleet) == ["10.0.0.2", "10.0.0.1"]
    assert fan_out_sources("gpu-07", fleet) == ["10.0.0.3", "10.0.0.1"]
    children = [fan_out_sources(name, fleet)[0] for name, _ in fleet[1:]]
    assert max(children.count(address) for address in set(children)) == 2
