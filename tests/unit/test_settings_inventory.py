"""Checks between an inventory's hosts: a host defined twice, two hosts at one SSH address; and the lab's own
inventory data passes every check."""

import subprocess
import sys

import pytest
from pyinfra.api import Inventory

from k3ops.inventory import address_errors, definition_errors, inventory_errors
from k3ops.settings import host_errors
from k3ops_lab import inventory as lab_inventory
from k3ops_lab import llama_server, registry, state
from k3ops_lab.profiles import PROFILES

GPU_01 = ("gpu-01", {"ssh_hostname": "10.0.0.1"})
GPU_02 = ("gpu-02", {"ssh_hostname": "10.0.0.2"})


def test_a_host_named_in_several_groups_is_a_member_of_each():
    groups = {"hgx": [GPU_01, GPU_02], "canary": ["gpu-01"], "all": ([GPU_01, "gpu-02"], {"ssh_user": "root"}),
              "rack1": ([GPU_01], {})}
    assert definition_errors(groups) == []


def test_a_host_given_different_data_in_two_groups_is_defined_twice():
    groups = {"hgx": [GPU_01, GPU_02], "mi355x": [("gpu-01", {"ssh_hostname": "10.0.0.9"})]}
    assert definition_errors(groups) == [
        "gpu-01: defined twice, in groups 'hgx' and 'mi355x', with different data (pyinfra would merge them, the "
        "last winning); give its data once and name it alone in its other groups"]


@pytest.mark.parametrize("hosts", [[GPU_01, GPU_02, GPU_01], ["gpu-01", "gpu-01"], [GPU_01, "gpu-01"]])
def test_a_host_listed_twice_in_one_group_is_refused(hosts):
    assert definition_errors({"hgx": (hosts, {})}) == ["gpu-01: listed twice in group 'hgx'; list each host once"]


def inventory(*hosts) -> Inventory:
    return Inventory((list(hosts), {}))


@pytest.mark.parametrize("hosts, message", [
    ((GPU_01, ("gpu-02", {"ssh_hostname": "10.0.0.1"})), "gpu-02: ssh_hostname: 10.0.0.1 port 22 is also the SSH "
                                                         "address of gpu-01; each inventory host must be a machine "
                                                         "of its own"),
    ((("gpu-01", {}), ("gpu-02", {"ssh_hostname": "GPU-01"})), "gpu-02: ssh_hostname: GPU-01 port 22 is also"),
    ((("gpu-01", {"ssh_hostname": "h", "ssh_port": 2222}), ("gpu-02", {"ssh_hostname": "h", "ssh_port": "2222"})),
     "gpu-02: ssh_hostname: h port 2222 is also the SSH address of gpu-01"),
])
def test_two_hosts_at_one_ssh_address_are_refused(hosts, message):
    errors = address_errors(inventory(*hosts))
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_one_address_on_two_ports_is_two_machines():
    assert address_errors(inventory(("gpu-01", {"ssh_hostname": "h", "ssh_port": 2201}),
                                    ("gpu-02", {"ssh_hostname": "h", "ssh_port": 2202}))) == []


@pytest.fixture
def lab_key(tmp_path, monkeypatch):
    """The lab's API key as `lab up` makes it (0600), a built llama-server and a pushed image, without a lab."""
    key = tmp_path / "engine-api-key"
    key.touch(mode=0o600)
    key.write_text("lab-key-0123456789abcdef\n")
    monkeypatch.setattr(state, "api_key", lambda: key)
    monkeypatch.setattr(llama_server, "sha256", lambda: "ab" * 32)
    monkeypatch.setattr(registry, "served", lambda: {"image": f"{registry.ADDRESS}/k3ops-lab/vllm-openai:standin",
                                                     "image_digest": "sha256:" + "cd" * 32})
    return key


@pytest.mark.parametrize("backend", ["container", "vm"])
def test_the_labs_host_data_passes_every_check(lab_key, backend):
    hosts = [(state.host_name(i), lab_inventory.host_data(state.LabHost(state.host_name(i), profile,
                                                                         state.host_address(i), backend)))
             for i, profile in enumerate(PROFILES)]
    for name, data in hosts:
        assert host_errors(name, data) == [], name
    assert inventory_errors(inventory(*hosts), {"lab": hosts}) == []


def test_a_vm_host_with_a_one_host_vllm_recipe_runs_it_from_the_lab_registry(lab_key):
    """Containers run on a VM host only; h200x8's vLLM recipe spans two hosts, so it keeps llama-server."""
    def engine(profile, backend):
        return lab_inventory.host_data(state.LabHost("gpu-01", profile, state.host_address(0), backend))["engine"]

    assert {profile: engine(profile, "vm")["recipe"] for profile in PROFILES} == {
        "h200x8": "llama.cpp-gguf", "b300x8": "vllm-b300x8", "gb300x4": "llama.cpp-gguf",
        "mi355x8": "vllm-mi355x8", "cpu": "llama.cpp-gguf"}
    assert {engine(profile, "container")["recipe"] for profile in PROFILES} == {"llama.cpp-gguf"}
    assert engine("b300x8", "vm")["image_digest"] == registry.served()["image_digest"]


HOST_KEY_SETTING = """
import sys
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory

with ctx_state.use(State()):
    inventory = make_inventory(sys.argv[1])
    State(inventory)  # as pyinfra's CLI: the state makes each host's connector
    for host in inventory:
        print(host.name, host.connector.data["ssh_strict_host_key_checking"])
"""


def test_a_deploy_checks_host_keys_unless_the_inventory_opts_out(tmp_path):
    """pyinfra alone trusts a new host's key (accept-new); an inventory that k3ops validates checks it, as
    pyinfra's CLI makes the hosts, in a process of its own."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        'hosts = [("gpu-01", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.1"}),\n'
        '         ("lab-01", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.2",\n'
        '                     "ssh_strict_host_key_checking": "no"})]\n'
        "from k3ops.inventory import validate_inventory\n"
        "validate_inventory(__file__)\n")
    plain = tmp_path / "plain.py"
    plain.write_text('hosts = [("gpu-01", {"ssh_hostname": "192.0.2.1"})]\n')

    def settings(path):
        result = subprocess.run([sys.executable, "-c", HOST_KEY_SETTING, str(path)], capture_output=True, text=True,
                                timeout=120, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return dict(line.split() for line in result.stdout.splitlines())

    assert settings(plain) == {"gpu-01": "accept-new"}  # what pyinfra does on its own
    assert settings(inventory) == {"gpu-01": "yes", "lab-01": "no"}


FLEET = ('hgx = [("gpu-01", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.1"}),\n'
         '       ("gpu-02", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.2"})]\n'
         'cpu = [("cpu-01", {"hardware_profile": "cpu", "ssh_hostname": "192.0.2.3"})]\n')


@pytest.mark.parametrize("limit", [["hgx"], ["cpu-*"], ["gpu-02", "cpu"], ["gpu-0[12]"], ["hgx", "cpu-01"]])
def test_limit_selects_what_pyinfras_own_limit_selects(tmp_path, limit):
    """Every verb's --limit is pyinfra's: host names, group names, globs of host names (read by pyinfra's CLI's
    own matcher here); a comma also separates them."""
    from pyinfra_cli.cli import _get_inventory_pattern_matches

    from k3ops.inventory import load, selected

    path = tmp_path / "fleet.py"
    path.write_text(FLEET)
    pyinfras = {host.name for host in _get_inventory_pattern_matches(load(path), limit, "--limit")}
    assert {host.name for host in selected(path, limit)} == pyinfras
    assert {host.name for host in selected(path, [",".join(limit)])} == pyinfras
