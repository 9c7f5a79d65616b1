"""inventory/prod.py, the example fleet, passes validation; each kind of bad data in it is named by host and field."""

import json
import shutil
import subprocess
import sys

import pytest

from ..conftest import REPO_ROOT


def validate(inventory) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", "validate", str(inventory)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120)


def test_the_example_fleet_is_valid():
    result = validate(REPO_ROOT / "inventory" / "prod.py")
    assert result.returncode == 0, result.stderr
    assert "every host's data is valid" in result.stdout


@pytest.mark.parametrize("group, change, message", [
    ("b300", ('"revision": "0000000000000000000000000000000000000000"', '"revision": "main"'),
     "b300-01: model.revision: 'main' is not a commit sha"),
    ("b300", ('"recipe": "vllm-b300x8"', '"recipe": "sglang-b300x8"'),
     "b300-02: engine: args: recipe 'sglang-b300x8' needs --mamba-full-memory-ratio in engine.args"),
    ("mi355x", ('"recipe": "vllm-mi355x8"', '"recipe": "vllm-b300x8"'),
     "mi355x-01: engine.recipe: recipe 'vllm-b300x8' is written for b300x8, not mi355x8"),
    ("mi355x", ('"image_digest": "sha256:', '"image": "rocm/vllm:kimi-k3", "_digest": "sha256:'),
     "mi355x-01: engine._digest: Extra inputs are not permitted"),
    ("llamacpp", ('    "api_key_file": "~/.config/k3ops/cpu-01.api-key",\n', ""),
     "cpu-01: engine: host: 0.0.0.0 is not loopback, so api_key_file is required"),
    ("llamacpp", ('    "model_file": "UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf",\n', ""),
     "cpu-01: engine: model_file: llama-server loads one GGUF file"),
    ("b300", ('hardware_profile = "b300x8"\n', 'hardware_profile = "b300x8"\ngpu_count = 4\n'),
     "b300-01: gpu_count: 4 disagrees with hardware_profile 'b300x8', which has 8 GPUs"),
])
def test_bad_data_is_named_by_host_and_field(tmp_path, group, change, message):
    shutil.copytree(REPO_ROOT / "inventory", tmp_path / "inventory", ignore=shutil.ignore_patterns("__pycache__"))
    data = tmp_path / "inventory" / "group_data" / f"{group}.py"
    before, after = change
    assert before in data.read_text()
    data.write_text(data.read_text().replace(before, after))
    result = validate(tmp_path / "inventory" / "prod.py")
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_every_example_host_gets_the_fleet_settings_and_no_lab_host_does():
    """group_data/all.py is pyinfra's group of every host in inventory/prod.py; the lab inventory sits in a
    directory of its own, so production group data never applies to it, even to a group of the same name."""
    script = (
        "import json\n"
        "import k3ops.lab.inventory as lab_inventory\n"
        "from k3ops.inventory import load\n"
        "lab_inventory.groups = lambda: {'b300': [('gpu-01', {'hardware_profile': 'b300x8'})]}\n"
        "print(json.dumps({'prod': {host.name: host.data.dict().get('ssh_key') for host in load('inventory/prod.py')},\n"
        "                  'lab': [host.data.dict() for host in load('inventory/lab/hosts.py')]}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert set(loaded["prod"].values()) == {"~/.ssh/k3ops_ed25519"} and len(loaded["prod"]) == 4
    assert loaded["lab"] == [{"hardware_profile": "b300x8"}]
