"""The launch recipes: the K3 guides' command lines flag for flag, hardware checks, and data overrides."""

import subprocess
import sys

import pytest

from k3ops.engines.recipes import RECIPES, RecipeError, command_line, recipe
from k3ops.settings import host_errors

VALUES = {"model_path": "/srv/k3ops/models/kimi-k3/current", "served_name": "kimi-k3", "host": "127.0.0.1",
          "port": "8000", "node_rank": "0", "head_address": "10.0.0.1", "shutdown_seconds": "600"}
B300 = {"hardware_profile": "b300x8", "gpu_vendor": "nvidia", "gpu_model": "NVIDIA B300 SXM6 AC", "gpu_count": 8}
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
DIGEST = "sha256:" + "a" * 64


def test_vllm_b300_is_the_blackwell_template_flag_for_flag():
    """The recipe of 2026-09-10 (k3-brief.md), with the model from the local cache instead of the Hub."""
    assert command_line(RECIPES["vllm-b300x8"], {}, VALUES) == [
        "--model", "/srv/k3ops/models/kimi-k3/current", "--served-model-name", "kimi-k3",
        "--host", "127.0.0.1", "--port", "8000", "--shutdown-timeout", "600",
        "--tensor-parallel-size", "8", "--gpu-memory-utilization", "0.95", "--kv-cache-dtype", "fp8",
        "--attention-backend", "TOKENSPEED_MLA",
        "--attention-config", '{"use_prefill_query_quantization":true,"mla_prefill_backend":"TOKENSPEED_MLA"}',
        "--prefix-match-unit", "128", "--enable-prefix-caching", "--max-model-len", "131072",
        "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]
    assert RECIPES["vllm-b300x8"].environment == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


def test_sglang_b300_is_the_cookbook_profile_with_the_operators_mamba_ratio():
    argv = command_line(RECIPES["sglang-b300x8"], {"--mamba-full-memory-ratio": 0.9}, {**VALUES, "port": "30000"})
    assert argv[:2] == ["sglang", "serve"]
    pairs = dict(zip(argv[2::1], argv[3::1]))
    assert pairs["--tp-size"] == "8" and pairs["--dcp-size"] == "8" and pairs["--mem-fraction-static"] == "0.85"
    assert pairs["--mamba-full-memory-ratio"] == "0.9" and pairs["--tool-call-parser"] == "kimi_k3"
    assert "--trust-remote-code" in argv


def test_the_mamba_ratio_is_never_defaulted():
    with pytest.raises(RecipeError, match="needs --mamba-full-memory-ratio in engine.args"):
        command_line(RECIPES["sglang-b300x8"], {}, VALUES)


def test_multi_node_ranks_and_head_address():
    head = command_line(RECIPES["vllm-gb300x4-2node"], {}, VALUES, node_rank=0)
    worker = command_line(RECIPES["vllm-gb300x4-2node"], {}, {**VALUES, "node_rank": "1"}, node_rank=1)
    for argv, rank in ((head, "0"), (worker, "1")):
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
        assert argv[argv.index("--nnodes") + 1] == "2"
    assert "--headless" in worker and "--headless" not in head


def test_overrides_replace_add_and_remove_flags():
    argv = command_line(RECIPES["vllm-b300x8"], {"--max-model-len": 32768, "--enforce-eager": True,
                                                 "--kv-cache-dtype": None, "--enable-prefix-caching": False}, VALUES)
    assert argv[argv.index("--max-model-len") + 1] == "32768"
    assert argv[-1] == "--enforce-eager"
    assert "--kv-cache-dtype" not in argv and "--enable-prefix-caching" not in argv


@pytest.mark.parametrize("name, profile", [("sglang-b300x8", "h200x8"), ("vllm-b300x8", "mi355x8"),
                                           ("vllm-mi355x8", "b300x8"), ("vllm-gb300x4-2node", "b300x8")])
def test_a_recipe_is_refused_on_other_hardware(name, profile):
    with pytest.raises(RecipeError, match=f"recipe '{name}' is written for .*, not {profile}"):
        recipe(name, profile)


def test_llama_cpp_runs_anywhere():
    assert recipe("llama.cpp-gguf", "cpu").engine == "llama.cpp"


@pytest.mark.parametrize("engine, message", [
    ({"recipe": "sglang-b300x8", "image_digest": DIGEST, "args": {"--mamba-full-memory-ratio": 0.9}},
     None),
    ({"recipe": "vllm-b300x8"}, "gpu-01: engine: Value error, image_digest: recipe 'vllm-b300x8' runs a container"),
    ({"recipe": "vllm-b300x8", "image_digest": DIGEST, "host": "0.0.0.0"},
     "gpu-01: engine: Value error, host: 0.0.0.0 is not loopback, so api_key_file is required"),
    ({"recipe": "sglang-b300x8", "image_digest": DIGEST},
     "gpu-01: engine: Value error, args: recipe 'sglang-b300x8' needs --mamba-full-memory-ratio"),
    ({"recipe": "vllm-b300x8", "image_digest": DIGEST, "args": {"max-model-len": 1}},
     "gpu-01: engine.args: Value error, 'max-model-len' is not a long flag"),
    ({"recipe": "vllm-b300x9", "image_digest": DIGEST}, "gpu-01: engine.recipe: Value error, unknown recipe"),
    ({"recipe": "llama.cpp-gguf"}, "gpu-01: engine: Value error, binary_url: recipe 'llama.cpp-gguf' runs a native"),
    ({"recipe": "sglang-b300x8", "image_digest": DIGEST, "host": "10.0.0.5", "api_key_file": "/k",
      "args": {"--mamba-full-memory-ratio": 0.9}}, "gpu-01: engine: Value error, api_key_file: SGLang reads its key"),
])
def test_engine_data_is_checked_with_host_and_field(engine, message):
    errors = host_errors("gpu-01", {**B300, "model": MODEL, "engine": engine})
    if message is None:
        assert errors == []
    else:
        assert any(error.startswith(message.replace("Value error, ", "")) for error in errors), errors


def test_the_b300_sglang_topology_is_refused_on_h200():
    errors = host_errors("gpu-01", {"hardware_profile": "h200x8", "gpu_vendor": "nvidia", "gpu_model": "NVIDIA H200",
                                    "gpu_count": 8, "model": MODEL,
                                    "engine": {"recipe": "sglang-b300x8", "image_digest": DIGEST,
                                               "args": {"--mamba-full-memory-ratio": 0.9}}})
    assert any("recipe 'sglang-b300x8' is written for b300x8, not h200x8" in error for error in errors), errors


H200_CLUSTER = {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": "h200-a"}


@pytest.mark.parametrize("hosts, message", [
    ([H200_CLUSTER, H200_CLUSTER], None),
    ([H200_CLUSTER], "h200-01: engine.cluster: 'h200-a' has 1 hosts, but recipe 'vllm-h200x8-2node' spans 2"),
    ([H200_CLUSTER] * 3, "h200-01, h200-02, h200-03: engine.cluster: 'h200-a' has 3 hosts"),
    ([H200_CLUSTER, {**H200_CLUSTER, "recipe": "llama.cpp-gguf", "image_digest": None, "binary_url": "http://x/l.tgz",
                     "binary_sha256": "c" * 64, "model_file": "m.gguf"}],
     "h200-02: engine.recipe: cluster 'h200-a' runs 'vllm-h200x8-2node' (as on h200-01), not 'llama.cpp-gguf'"),
])
def test_a_cluster_is_checked_as_a_whole_before_any_host_is_touched(tmp_path, hosts, message):
    """A missing or extra rank, or a host on another recipe, would only show as a start hanging in NCCL init."""
    inventory = tmp_path / "cluster.py"
    host_data = {"hardware_profile": "h200x8", "gpu_vendor": "nvidia", "gpu_model": "NVIDIA H200", "gpu_count": 8,
                 "model": MODEL}
    inventory.write_text(
        "from k3ops.inventory import validate_inventory\n\n"
        f"h200 = {[(f'h200-{index:02d}', {**host_data, 'engine': engine}) for index, engine in enumerate(hosts, 1)]!r}\n"
        "validate_inventory(__file__)\n")
    result = subprocess.run([sys.executable, "-m", "k3ops.cli", "validate", str(inventory)], capture_output=True,
                            text=True, cwd=tmp_path, timeout=120)
    if message is None:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1 and message in result.stderr, result.stderr
