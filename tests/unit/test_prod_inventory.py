"""inventory/prod.py, the example fleet: refused as shipped, naming each placeholder to replace; valid once
they are replaced; and each kind of bad data in it named by host and field, with no host contacted."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ..conftest import REPO_ROOT, cli

PLACEHOLDER_REVISION = "0" * 40
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
PLACEHOLDER_SHA256 = "0" * 64
# What an operator puts in their place: looked up values, not zeros.
REVISION = "4f1c0a9e7d2b8c3a5e6f7d8c9b0a1e2f3d4c5b6a"
DIGEST = "sha256:" + "5d" * 32
SHA256 = "9a" * 32
API_KEY_FILE = '"api_key_file": "~/.config/k3ops/cpu-01.api-key"'
PLACEHOLDER = "replace the example's placeholder (all zeros) with"


@pytest.fixture
def validate(monkeypatch):
    """`k3ops validate INVENTORY` run from the repository with HOME at `home`, so `~` in the inventory is the
    test's own."""
    def run(inventory, home) -> subprocess.CompletedProcess:
        with monkeypatch.context() as patch:
            patch.setenv("HOME", str(home))
            patch.chdir(REPO_ROOT)
            return cli("validate", str(inventory))
    return run


def filled_in(tmp_path):
    """A copy of the example inventory with real-looking pins in place of the placeholders, and its API key
    file made (0600) under the test's HOME; returns (prod.py, HOME)."""
    copy, home = tmp_path / "inventory", tmp_path / "home"
    shutil.copytree(REPO_ROOT / "inventory", copy, ignore=shutil.ignore_patterns("__pycache__"))
    for data in (copy / "group_data").glob("*.py"):
        text = data.read_text().replace(PLACEHOLDER_DIGEST, DIGEST).replace(PLACEHOLDER_REVISION, REVISION)
        data.write_text(text.replace(f'"{PLACEHOLDER_SHA256}"', f'"{SHA256}"'))
    key = home / ".config" / "k3ops" / "cpu-01.api-key"
    key.parent.mkdir(parents=True)
    key.touch(mode=0o600)
    key.write_text("0123456789abcdef\n")
    return copy / "prod.py", home


def test_the_example_fleet_as_shipped_names_each_placeholder_to_replace(tmp_path, validate):
    result = validate(REPO_ROOT / "inventory" / "prod.py", tmp_path)
    assert result.returncode == 1
    named = {line.strip().split(": replace")[0] for line in result.stderr.splitlines() if PLACEHOLDER in line}
    assert named == {*(f"{host}: model.revision" for host in ("b300-01", "b300-02", "mi355x-01", "cpu-01")),
                     *(f"{host}: engine.image_digest" for host in ("b300-01", "b300-02", "mi355x-01")),
                     "cpu-01: engine.binary_sha256"}
    assert "`docker buildx imagetools inspect vllm/vllm-openai:kimi-k3` prints it" in result.stderr
    assert "'Files and versions' > 'History'" in result.stderr and "| sha256sum` prints it" in result.stderr
    assert "cpu-01: engine.api_key_file: ~/.config/k3ops/cpu-01.api-key does not exist on this controller" in result.stderr


def test_the_docs_show_what_validate_says_of_the_example_as_shipped(tmp_path, validate):
    page = (REPO_ROOT / "docs" / "provisioning.md").read_text()
    shown = page.split("    $ k3ops validate inventory/prod.py\n", 1)[1].split("\n\n", 1)[0].splitlines()
    result = validate(REPO_ROOT / "inventory" / "prod.py", tmp_path)
    said = result.stderr.splitlines()
    assert len(shown) > 3 and all(line.removeprefix("    ") in said for line in shown if line.strip() != "..."), said


def test_the_example_fleet_is_valid_once_its_placeholders_are_replaced(tmp_path, validate):
    inventory, home = filled_in(tmp_path)
    result = validate(inventory, home)
    assert result.returncode == 0, result.stderr
    assert "every host's data is valid" in result.stdout


@pytest.mark.parametrize("group, change, message", [
    ("b300", (f'"revision": "{REVISION}"', '"revision": "main"'),
     "b300-01: model.revision: 'main' is not a commit sha"),
    ("b300", ('"recipe": "vllm-b300x8"', '"recipe": "sglang-b300x8"'),
     "b300-02: engine: args: recipe 'sglang-b300x8' needs --mamba-full-memory-ratio in engine.args"),
    ("mi355x", ('"recipe": "vllm-mi355x8"', '"recipe": "vllm-b300x8"'),
     "mi355x-01: engine.recipe: recipe 'vllm-b300x8' is written for b300x8, not mi355x8"),
    ("mi355x", ('"image_digest": "sha256:', '"image": "rocm/vllm:kimi-k3", "_digest": "sha256:'),
     "mi355x-01: engine._digest: Extra inputs are not permitted"),
    ("llamacpp", (f'    {API_KEY_FILE},\n', ""),
     "cpu-01: engine: host: 0.0.0.0 is not loopback, so api_key_file is required"),
    ("llamacpp", ('    "model_file": "UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf",\n', ""),
     "cpu-01: engine: model_file: llama-server loads one GGUF file"),
    ("b300", ('hardware_profile = "b300x8"\n', 'hardware_profile = "b300x8"\ngpu_count = 4\n'),
     "b300-01: gpu_count: 4 disagrees with hardware_profile 'b300x8', which has 8 GPUs"),
    # Section 3 of issue 12: each refused before any host is touched, naming host and field.
    ("b300", ('"/dev/nvme3n1"]', '"/dev/../etc/passwd"]'),
     "b300-01: nvme_devices: '/dev/../etc/passwd' is not a device path like '/dev/nvme1n1'"),
    ("b300", ('"/dev/nvme3n1"]', '"/dev/nvme3n1 "]'), "b300-02: nvme_devices: '/dev/nvme3n1 ' is not a device path"),
    ("b300", ('"/dev/nvme3n1"]', '"/dev/nvme2n1"]'),
     "b300-01: nvme_devices: '/dev/nvme2n1' is listed more than once; list each device once"),
    ("mi355x", ('"/dev/nvme1n1"]\n', '"/dev/nvme1n1"]\nmodel_cache_wipe = ["/dev/nvme2n1"]\n'),
     "mi355x-01: model_cache_wipe: '/dev/nvme2n1' is not one of nvme_devices"),
    ("llamacpp", ('hardware_profile = "cpu"\n', 'hardware_profile = "cpu"\nmodel_cache_path = "/var/lib"\n'),
     "cpu-01: model_cache_path: '/var/lib' is or holds the system directory /var/lib"),
    ("llamacpp", ('hardware_profile = "cpu"\n', 'hardware_profile = "cpu"\nmodel_cache_path = "/"\n'),
     "cpu-01: model_cache_path: '/' is or holds the system directory /bin"),
    ("llamacpp", ('hardware_profile = "cpu"\n', 'hardware_profile = "cpu"\nmodel_cache_path = "/srv/../etc"\n'),
     "cpu-01: model_cache_path: '/srv/../etc' is not a plain absolute path"),
    ("llamacpp", ('hardware_profile = "cpu"\n', 'hardware_profile = "cpu"\nmodel_cache_path = "/srv/$(reboot)"\n'),
     "cpu-01: model_cache_path: '/srv/$(reboot)' is not a plain absolute path"),
    ("llamacpp", ('hardware_profile = "cpu"\n', "hardware_profile = \"cpu\"\nmodel_cache_path = '/srv/m\" x'\n"),
     "cpu-01: model_cache_path: '/srv/m\" x' is not a plain absolute path"),
    ("b300", ('hardware_profile = "b300x8"\n', 'hardware_profile = "b300x8"\nservice_user = "root"\n'),
     "b300-01: service_user: 'root' is a system account"),
    ("b300", ('hardware_profile = "b300x8"\n', 'hardware_profile = "b300x8"\nservice_user = "k3ops-peer"\n'),
     "b300-01: service_user: 'k3ops-peer' is k3ops's own peer-copy user"),
    ("mi355x", ('rocm_release = "7.0.2"', 'rocm_release = "5.7.1"'),
     "mi355x-01: rocm_release: 5.7.1 does not support the AMD Instinct MI355X (CDNA4), which needs ROCm 7.0.0"),
    ("mi355x", ('rocm_release = "7.0.2"', 'rocm_release = "7.0.2"\nfabric_manager = "on"'),
     "mi355x-01: fabric_manager: 'on' needs NVIDIA GPUs on NVSwitches; hardware_profile 'mi355x8' has AMD Instinct"),
    ("mi355x", ('rocm_release = "7.0.2"', 'rocm_release = "7.0.2"\npeer_address = "10.0.0.1;reboot"'),
     "mi355x-01: peer_address: '10.0.0.1;reboot' is not a host name or an IP address"),
    ("b300", ('"recipe": "vllm-b300x8",', '"recipe": "vllm-b300x8", "image": "vllm/vllm-openai:x\\nExecStartPre=/x",'),
     "b300-01: engine.image: 'vllm/vllm-openai:x\\nExecStartPre=/x' is not an image reference"),
    ("b300", ('{"--max-model-len": 32768}', '{"--max-model-len": "1\\nExecStartPre=/bin/sh -c reboot"}'),
     "b300-01: engine.args: --max-model-len: '1\\nExecStartPre=/bin/sh -c reboot' contains a line break"),
    ("b300", ('"args":', '"environment": {"A B": "1"}, "args":'),
     "b300-02: engine.environment: 'A B' is not an environment variable name"),
])
def test_bad_data_is_named_by_host_and_field(tmp_path, group, change, message, validate):
    inventory, home = filled_in(tmp_path)
    data = inventory.parent / "group_data" / f"{group}.py"
    before, after = change
    assert before in data.read_text()
    data.write_text(data.read_text().replace(before, after))
    result = validate(inventory, home)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("mode, message", [
    (0o644, "cpu-01: engine.api_key_file: ~/.config/k3ops/cpu-01.api-key is open to group or others (mode 0644); "
            "keep the key its owner's alone: `chmod 600 ~/.config/k3ops/cpu-01.api-key`"),
    (0o640, "is open to group or others (mode 0640)"),
    (None, "cpu-01: engine.api_key_file: ~/.config/k3ops/cpu-01.api-key is not a regular file"),
])
def test_an_api_key_file_others_can_read_is_refused_as_ssh_refuses_a_private_key(tmp_path, mode, message, validate):
    inventory, home = filled_in(tmp_path)
    key = home / ".config" / "k3ops" / "cpu-01.api-key"
    if mode is None:
        key.unlink()
        key.mkdir()
    else:
        key.chmod(mode)
    result = validate(inventory, home)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


B300_02 = '("b300-02", {"ssh_hostname": "192.0.2.12"}),'
MI355X_01 = '("mi355x-01", {"ssh_hostname": "192.0.2.21"}),'


@pytest.mark.parametrize("change, message", [
    # pyinfra would make one host of these two, with mi355x's address and both groups' data.
    ((MI355X_01, MI355X_01 + '\n    ("b300-01", {"ssh_hostname": "192.0.2.22"}),'),
     "b300-01: defined twice, in groups 'b300' and 'mi355x', with different data"),
    ((B300_02, B300_02 + '\n    ("b300-01", {"ssh_hostname": "192.0.2.11"}),'),
     "b300-01: listed twice in group 'b300'; list each host once"),
    ((B300_02, '("b300-02", {"ssh_hostname": "192.0.2.11"}),'),
     "b300-02: ssh_hostname: 192.0.2.11 port 22 is also the SSH address of b300-01"),
])
def test_hosts_defined_twice_or_sharing_an_address_are_refused(tmp_path, change, message, validate):
    inventory, home = filled_in(tmp_path)
    before, after = change
    assert before in inventory.read_text()
    inventory.write_text(inventory.read_text().replace(before, after))
    result = validate(inventory, home)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_a_host_in_a_second_group_of_the_same_data_is_a_member_not_a_second_definition(tmp_path, validate):
    inventory, home = filled_in(tmp_path)
    inventory.write_text(inventory.read_text().replace(
        "validate_inventory(__file__)",
        'canary = [b300[0], "b300-02"]  # the first host again, with its own data; the second by name\n'
        "validate_inventory(__file__)"))
    result = validate(inventory, home)
    assert result.returncode == 0, result.stderr


def test_every_example_host_gets_the_fleet_settings_and_no_lab_host_does(tmp_path):
    """group_data/all.py is pyinfra's group of every host in inventory/prod.py; the lab inventory sits in a
    directory of its own, so production group data never applies to it, even to a group of the same name."""
    inventory, home = filled_in(tmp_path)
    script = (
        "import json, sys\n"
        "import k3ops_lab.inventory as lab_inventory\n"
        "from k3ops.inventory import load\n"
        "lab_inventory.groups = lambda: {'b300': [('gpu-01', {'hardware_profile': 'b300x8'})]}\n"
        "print(json.dumps({'prod': {host.name: host.data.dict().get('ssh_key') for host in load(sys.argv[1])},\n"
        "                  'lab': [host.data.dict() for host in load('inventory/lab/hosts.py')]}))\n")
    result = subprocess.run([sys.executable, "-c", script, str(inventory)], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120, env={**os.environ, "HOME": str(home)})
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert set(loaded["prod"].values()) == {"~/.ssh/k3ops_ed25519"} and len(loaded["prod"]) == 4
    assert loaded["lab"] == [{"hardware_profile": "b300x8"}]
