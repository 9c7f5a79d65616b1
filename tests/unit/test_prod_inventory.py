"""inventory/prod.py, the example fleet, passes validation; each kind of bad data in it is named by host and field."""

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
    ("k3_b300", ('"revision": "0000000000000000000000000000000000000000"', '"revision": "main"'),
     "b300-01: model.revision: 'main' is not a commit sha"),
    ("k3_b300", ('"recipe": "vllm-b300x8"', '"recipe": "sglang-b300x8"'),
     "b300-02: engine: args: recipe 'sglang-b300x8' needs --mamba-full-memory-ratio in engine.args"),
    ("k3_mi355x", ('"recipe": "vllm-mi355x8"', '"recipe": "vllm-b300x8"'),
     "mi355x-01: engine.recipe: recipe 'vllm-b300x8' is written for b300x8, not mi355x8"),
    ("k3_mi355x", ('"image_digest": "sha256:', '"image": "rocm/vllm:kimi-k3", "_digest": "sha256:'),
     "mi355x-01: engine._digest: Extra inputs are not permitted"),
    ("k3_llamacpp", ('    "api_key_file": "~/.config/k3ops/cpu-01.api-key",\n', ""),
     "cpu-01: engine: host: 0.0.0.0 is not loopback, so api_key_file is required"),
    ("k3_llamacpp", ('    "model_file": "UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf",\n', ""),
     "cpu-01: engine: model_file: llama-server loads one GGUF file"),
    ("k3_b300", ('gpu_count = 8', 'gpu_count = 4'),
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
