"""The lab's stand-in `vllm serve`: it takes every command line the vLLM recipes render, refuses what vLLM
refuses, and needs the GPUs vLLM would (served end to end in the VM test, tests/lab/test_vm.py)."""

import threading
import time

import pytest

from k3ops.engines.recipes import RECIPES, command_line
from k3ops_lab import vllm_standin

VALUES = {"model_path": "/srv/k3ops/models/kimi-k3/current", "served_name": "kimi-k3", "host": "10.0.0.1",
          "port": "8000", "node_rank": "1", "head_address": "10.0.0.2", "shutdown_seconds": "600"}
VLLM_COMMAND_LINES = [(name, rank) for name, found in RECIPES.items() if found.engine == "vllm"
                      for rank in range(found.nodes)]
GPUS = [f"/dev/nvidia{index}" for index in range(8)]


def parsed(argv):
    return vllm_standin.parser().parse_args(argv)


@pytest.mark.parametrize("name, rank", VLLM_COMMAND_LINES)
def test_every_vllm_recipe_command_line_is_taken_and_fits_eight_gpus(name, rank):
    found = RECIPES[name]
    overrides = {"--max-model-len": 2048}
    args = parsed(command_line(found, overrides, VALUES, rank))
    assert (args.model, args.served_model_name, args.host, args.port) == (VALUES["model_path"], ["kimi-k3"],
                                                                            "10.0.0.1", 8000)
    assert args.headless == (rank > 0) and args.max_model_len == 2048 and args.shutdown_timeout == 600
    assert vllm_standin.world_size_error(args, GPUS) is None


def test_a_flag_vllm_does_not_know_is_refused(capsys):
    with pytest.raises(SystemExit) as refused:
        parsed(["--model", "/m", "--tensor-parallel", "8"])
    assert refused.value.code == 2
    assert "vllm serve: error: unrecognized arguments: --tensor-parallel" in capsys.readouterr().err


@pytest.mark.parametrize("argv, found, error", [
    (["--tensor-parallel-size", "8"], [], "RuntimeError: No CUDA GPUs are available"),
    (["--tensor-parallel-size", "8"], GPUS[:7], "ValueError: The number of required GPUs exceeds the total number "
                                                "of available GPUs in the placement group (needed 8, found 7"),
    (["-tp", "8", "-pp", "2", "--nnodes", "2"], GPUS, None),
    (["-tp", "8", "-pp", "2"], GPUS, "(needed 16, found 8"),
])
def test_the_world_size_needs_its_gpus_on_this_node(argv, found, error):
    message = vllm_standin.world_size_error(parsed(["--model", "/m", *argv]), found)
    assert message == error if error is None else error in message


def test_the_gguf_served_is_the_file_given_or_the_first_shard_in_the_directory(tmp_path):
    for name in ("Kimi-K3-Q4-00002-of-00002.gguf", "Kimi-K3-Q4-00001-of-00002.gguf"):
        (tmp_path / "Q4").mkdir(exist_ok=True)
        (tmp_path / "Q4" / name).write_text("")
    assert vllm_standin.gguf_file(str(tmp_path)) == tmp_path / "Q4" / "Kimi-K3-Q4-00001-of-00002.gguf"
    assert vllm_standin.gguf_file(str(tmp_path / "Q4" / "Kimi-K3-Q4-00002-of-00002.gguf")).name.endswith("2.gguf")
    with pytest.raises(SystemExit, match="No supported config format found"):
        vllm_standin.gguf_file(str(tmp_path / "Q4" / "missing"))


def test_a_shutdown_refuses_new_generations_and_waits_for_those_in_flight():
    """As vLLM's --shutdown-timeout: new requests refused at once, those in flight given up to the timeout."""
    generations = vllm_standin.Generations()
    assert generations.start() and generations.start()
    assert generations.drain(0.05) == 2  # the limit passes with both still running: they are aborted
    assert not generations.start()  # refused once the shutdown began
    finishers = [threading.Timer(delay, generations.end) for delay in (0.1, 0.2)]
    for finisher in finishers:
        finisher.start()
    started = time.monotonic()
    assert generations.drain(30) == 0 and time.monotonic() - started < 10  # ends when the last one does
