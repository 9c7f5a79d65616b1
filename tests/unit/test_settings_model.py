"""The model spec: pinned revisions only, and bad model data named by host and field."""

import pytest

from k3ops.deploys.checkpoint import fan_out_sources
from k3ops.settings import host_errors
from k3ops.settings.model import ModelHostSpec

CPU = {"hardware_profile": "cpu", "gpu_count": 0}
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}


def test_a_pinned_model_passes():
    assert host_errors("gpu-01", {**CPU, "model": MODEL}) == []


@pytest.mark.parametrize("change, message", [
    ({"revision": "main"}, "gpu-01: model.revision: 'main' is not a commit sha: pin the full 40-hex commit"),
    ({"revision": "0123456"}, "gpu-01: model.revision: '0123456' is not a commit sha"),
    ({"revision": MODEL["revision"] + "\n"}, "gpu-01: model.revision: '0123456789abcdef0123456789abcdef01234567\\n' is "),
    ({"name": "kimi-k3\n"}, "gpu-01: model.name: String should match pattern"),
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
    ({"model_cache_path": "relative/path"}, "gpu-01: model_cache_path: 'relative/path' is not a plain absolute path"),
    ({"model_cache_wipe": ["nvme1n1"]}, "gpu-01: model_cache_wipe: 'nvme1n1' is not a device path"),
    ({"nvme_devices": ["nvme0n1"]}, "gpu-01: nvme_devices: 'nvme0n1' is not a device path"),
    ({"model_source": "bittorrent"}, "gpu-01: model_source: Input should be 'peers' or 'hub'"),
    ({"hf_endpoint": "huggingface.co"}, "gpu-01: hf_endpoint: 'huggingface.co' is not an http(s) URL"),
    ({"hf_endpoint": "https://hub.example/\"; reboot"}, "gpu-01: hf_endpoint: 'https://hub.example/\"; reboot' is not"),
    ({"python_index_url": "https://pypi.example/simple;reboot"}, "gpu-01: python_index_url: 'https://pypi.example/simple;"),
    ({"python_find_links": "http://10.0.0.1/wheels/ --pre"}, "gpu-01: python_find_links: 'http://10.0.0.1/wheels/ --pre'"),
    ({"hf_endpoint": "https://hub_mirror.example"}, "gpu-01: hf_endpoint: 'https://hub_mirror.example' is not"),
    ({"hf_endpoint": "https://[fe80::1%eth0]/"}, "gpu-01: hf_endpoint: 'https://[fe80::1%eth0]/' is not"),
    ({"model_peer_key": "keys/peer"}, "gpu-01: model_peer_key: 'keys/peer' is not a plain controller path"),
    ({"model_peer_key": "~/../other/.ssh/id_ed25519"}, "gpu-01: model_peer_key: '~/../other/.ssh/id_ed25519' is not"),
    ({"nccl_mpi_key": "~/k3ops key"}, "gpu-01: nccl_mpi_key: '~/k3ops key' is not a plain controller path"),
])
def test_bad_cache_data_names_host_and_field(data, message):
    errors = host_errors("gpu-01", {**CPU, "model": MODEL, **data})
    assert any(error.startswith(message) for error in errors), errors


@pytest.mark.parametrize("field", ["hf_endpoint", "python_index_url", "python_find_links"])
def test_what_runs_on_the_host_comes_over_https_unless_data_allows_plain_http(field):
    """The Hub's digests, the fetcher's wheels: whoever answers plain http on the path would choose them."""
    assert host_errors("gpu-01", {**CPU, "model": MODEL, field: "http://mirror.example/simple/"}) == [
        f"gpu-01: {field}: 'http://mirror.example/simple/': what this URL serves is trusted, so it must be https "
        "(plain http can be answered by anyone on the path); set allow_plain_http = True only for a network you "
        "control"]
    assert host_errors("gpu-01", {**CPU, "model": MODEL, "allow_plain_http": True,
                                  field: "http://mirror.example/simple/"}) == []


def test_the_examples_placeholder_revision_is_refused_with_how_to_find_the_commit():
    errors = host_errors("gpu-01", {**CPU, "model": {**MODEL, "revision": "0" * 40}})
    assert errors == [
        "gpu-01: model.revision: replace the example's placeholder (all zeros) with the commit you reviewed: find it on "
        "the repository's 'Files and versions' > 'History' page on the Hub, or with `python -c \"import huggingface_hub "
        "as h; print(h.model_info('moonshotai/Kimi-K3', revision='main').sha)\"`"]


@pytest.mark.parametrize("path", ["/srv/k3ops/models", "/mnt/models", "/data/k3", "/var/lib/k3ops-models",
                                  "/home/models", "/srv/k3ops/kimi_k3.cache-1"])
def test_a_directory_of_its_own_is_a_good_cache_path(path):
    assert host_errors("gpu-01", {**CPU, "model_cache_path": path}) == []


@pytest.mark.parametrize("path, message", [
    *((path, f"'{path}' is or holds the system directory {path}, which the volume mounted there would hide")
      for path in ("/etc", "/usr", "/var", "/boot", "/root", "/home", "/srv", "/opt", "/var/lib", "/usr/local",
                   "/var/lib/docker", "/opt/k3ops", "/var/lib/k3ops")),
    ("/", "'/' is or holds the system directory /bin"),
    ("/var/lib/k3ops/engine", "'/var/lib/k3ops/engine' is under /var/lib/k3ops, where no volume belongs"),
    ("/var/lib/k3ops/home/k3ops", "'/var/lib/k3ops/home/k3ops' is under /var/lib/k3ops, where no volume belongs"),
    ("/usr/lib/x86_64-linux-gnu", "'/usr/lib/x86_64-linux-gnu' is under /usr, where no volume belongs"),
    ("/etc/k3ops/models", "'/etc/k3ops/models' is under /etc, where no volume belongs"),
    ("/proc/models", "'/proc/models' is under /proc, where no volume belongs"),
    ("/tmp/models", "'/tmp/models' is under /tmp, where no volume belongs"),
    ("/srv/../etc", "'/srv/../etc' is not a plain absolute path: letters, digits and ._-/ only, no '..', '//' or "
                    "trailing '/'; give the model cache a directory of its own, e.g. '/srv/k3ops/models'"),
    ("/srv/k3ops/models/", "'/srv/k3ops/models/' is not a plain absolute path"),
    ("/srv//models", "'/srv//models' is not a plain absolute path"),
    ("/srv/$(reboot)", "'/srv/$(reboot)' is not a plain absolute path"),
    ("/srv/`reboot`", "'/srv/`reboot`' is not a plain absolute path"),
    ('/srv/m" x', "'/srv/m\" x' is not a plain absolute path"),
    ("/srv/m'x", "\"/srv/m'x\" is not a plain absolute path"),
    ("/srv/m;reboot", "'/srv/m;reboot' is not a plain absolute path"),
    ("/srv/m\nx", "'/srv/m\\nx' is not a plain absolute path"),
    ("/srv/m x", "'/srv/m x' is not a plain absolute path"),
])
def test_a_cache_path_that_is_a_system_directory_or_reaches_a_shell_is_refused(path, message):
    errors = host_errors("gpu-01", {**CPU, "model_cache_path": path})
    assert len(errors) == 1 and errors[0].startswith(f"gpu-01: model_cache_path: {message}"), errors


@pytest.mark.parametrize("data, message", [
    ({"nvme_devices": ["/dev/../etc/passwd"]}, "nvme_devices: '/dev/../etc/passwd' is not a device path like"),
    ({"nvme_devices": ["/dev/nvme0n1 "]}, "nvme_devices: '/dev/nvme0n1 ' is not a device path"),
    ({"nvme_devices": ["/dev/nvme0n1\n"]}, "nvme_devices: '/dev/nvme0n1\\n' is not a device path"),
    ({"nvme_devices": ["/dev/nvme0n1;reboot"]}, "nvme_devices: '/dev/nvme0n1;reboot' is not a device path"),
    ({"nvme_devices": ["/dev/"]}, "nvme_devices: '/dev/' is not a device path"),
    ({"nvme_devices": ["/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme0n1"]},
     "nvme_devices: '/dev/nvme0n1' is listed more than once; list each device once"),
    ({"nvme_devices": ["/dev/nvme0n1"], "model_cache_wipe": ["/dev/nvme1n1"]},
     "model_cache_wipe: '/dev/nvme1n1' is not one of nvme_devices; only a cache device may be wiped"),
    ({"model_cache_wipe": ["/dev/nvme1n1"]}, "model_cache_wipe: '/dev/nvme1n1' is not one of nvme_devices"),
])
def test_cache_devices_are_plain_device_nodes_each_once_and_only_they_may_be_wiped(data, message):
    errors = host_errors("gpu-01", {**CPU, **data})
    assert errors and all(error.startswith(f"gpu-01: {message.split(':')[0]}:") for error in errors), errors
    assert any(error.startswith(f"gpu-01: {message}") for error in errors), errors


def test_cache_devices_by_name_or_by_id_pass():
    devices = ["/dev/nvme0n1", "/dev/disk/by-id/nvme-SAMSUNG_MZWLO3T8HCLS-00A07_S7ABNA0X123456"]
    assert host_errors("gpu-01", {**CPU, "nvme_devices": devices, "model_cache_wipe": devices[1:]}) == []


@pytest.mark.parametrize("address", ["10.1.0.7", "fe80::1", "fd00:10:0:1::7", "gpu-07", "gpu-07.dc1.example.com",
                                     "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61])
def test_a_hostname_or_ip_address_is_a_peer_address(address):
    assert host_errors("gpu-01", {**CPU, "peer_address": address}) == []


@pytest.mark.parametrize("address", ["gpu 07", "10.0.0.1;reboot", "$(reboot)", "-oProxyCommand=x", "gpu_07",
                                     "a" * 64 + ".example.com", "gpu-07\n", "gpu-07.example.com.", "gpu-*",
                                     "gpu-07,gpu-08", "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62])
def test_anything_else_is_not_a_peer_address(address):
    assert host_errors("gpu-01", {**CPU, "peer_address": address}) == [
        f"gpu-01: peer_address: {address!r} is not a host name or an IP address (like 'gpu-01.example.com', "
        "'10.0.0.7' or 'fd00::7')"]


@pytest.mark.parametrize(("address", "message"), [
    ("999.1.1.1", "is not an IP address"),
    ("::1%lo\nssh-ed25519 AAAA", "has an IPv6 zone id (after '%'); give the address alone"),
    ("fe80::1%eth0", "has an IPv6 zone id"),
    ("FD00::7", "is not in canonical form; write it as 'fd00::7'"),
    ("fd00:0:0::7", "is not in canonical form; write it as 'fd00::7'"),
    ("::ffff:10.0.0.7", "is an IPv4-mapped IPv6 address; write the IPv4 address 10.0.0.7")])
def test_an_ip_address_has_one_spelling_and_no_zone_id(address, message):
    """A zone id is any text (newlines included) and makes `::1%x` loopback; one address, one spelling, so
    the controller guard and known_hosts see it as every tool prints it."""
    [error] = host_errors("gpu-01", {**CPU, "peer_address": address})
    assert error.startswith(f"gpu-01: peer_address: {address!r} {message}"), error


def test_a_bad_ssh_hostname_is_refused_as_itself_and_as_the_peer_address_it_becomes():
    errors = host_errors("gpu-01", {**CPU, "ssh_hostname": "gpu 07"})
    assert [error.split(":")[1] for error in errors] == [" ssh_hostname", " peer_address"], errors


@pytest.mark.parametrize("name", ["gpu-*", "gpu-01,gpu-02", "-oProxyCommand=x", "gpu-01\nevil", "gpu 01",
                                  "gpu-01.example.com.", "::1%lo", "@local x"])
def test_an_inventory_host_name_is_a_host_name_or_an_address(name):
    """The name is a word of known_hosts, mpirun's host list and --limit's glob: a `*` in it makes a one-host
    upgrade group every host, a `,` adds a host to mpirun's list, a leading `-` is an option."""
    [error] = host_errors(name, CPU)
    assert error.startswith(f"{name!r}: the inventory's host name: "), error


@pytest.mark.parametrize("name", ["gpu-01", "gpu-01.dc1.example.com", "10.0.0.7", "fd00::7", "@local",
                                  "@docker/debian:12"])
def test_legitimate_inventory_host_names_pass(name):
    assert host_errors(name, CPU) == []


def test_glob_patterns_are_one_line_each():
    errors = host_errors("gpu-01", {**CPU, "model": {**MODEL, "allow_patterns": ["*.json", "x\n*"]}})
    assert errors == ["gpu-01: model.allow_patterns.1: 'x\\n*' contains a line break or control character ('\\n'): "
                      "give one line of plain text"]


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
