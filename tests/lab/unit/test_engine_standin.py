"""The lab's stand-in `vllm serve` and `sglang serve`: each takes every command line its engine's recipes render,
refuses what the engine refuses, needs the GPUs it would, and stops as it does (served end to end in the VM test,
tests/lab/test_vm.py)."""

import threading
import time

import pytest

from k3ops.engines.recipes import RECIPES, command_line
from k3ops_lab import engine_standin

VALUES = {"model_path": "/srv/k3ops/models/kimi-k3/current", "served_name": "kimi-k3", "host": "10.0.0.1",
          "port": "8000", "node_rank": "1", "head_address": "10.0.0.2", "shutdown_seconds": "600"}
VLLM_COMMAND_LINES = [(name, rank) for name, found in RECIPES.items() if found.engine == "vllm"
                      for rank in range(found.nodes)]
SGLANG_RECIPES = [name for name, found in RECIPES.items() if found.engine == "sglang"]
GPUS = [f"/dev/nvidia{index}" for index in range(8)]


def parsed(argv):
    return engine_standin.parser().parse_args(argv)


@pytest.mark.parametrize("name, rank", VLLM_COMMAND_LINES)
def test_every_vllm_recipe_command_line_is_taken_and_fits_eight_gpus(name, rank):
    found = RECIPES[name]
    overrides = {"--max-model-len": 2048}
    args = parsed(command_line(found, overrides, VALUES, rank))
    assert (args.model, args.served_model_name, args.host, args.port) == (VALUES["model_path"], ["kimi-k3"],
                                                                            "10.0.0.1", 8000)
    assert args.headless == (rank > 0) and args.max_model_len == 2048 and args.shutdown_timeout == 600
    assert engine_standin.world_size_error(args, GPUS) is None


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
    message = engine_standin.world_size_error(parsed(["--model", "/m", *argv]), found)
    assert message == error if error is None else error in message


def test_the_gguf_served_is_the_file_given_or_the_first_shard_in_the_directory(tmp_path):
    for name in ("Kimi-K3-Q4-00002-of-00002.gguf", "Kimi-K3-Q4-00001-of-00002.gguf"):
        (tmp_path / "Q4").mkdir(exist_ok=True)
        (tmp_path / "Q4" / name).write_text("")
    assert engine_standin.gguf_file(str(tmp_path)) == tmp_path / "Q4" / "Kimi-K3-Q4-00001-of-00002.gguf"
    assert engine_standin.gguf_file(str(tmp_path / "Q4" / "Kimi-K3-Q4-00002-of-00002.gguf")).name.endswith("2.gguf")
    with pytest.raises(SystemExit, match="No supported config format found"):
        engine_standin.gguf_file(str(tmp_path / "Q4" / "missing"))


def test_a_shutdown_refuses_new_generations_and_waits_for_those_in_flight():
    """As vLLM's --shutdown-timeout: new requests refused at once, those in flight given up to the timeout."""
    generations = engine_standin.Generations()
    assert generations.start() and generations.start()
    assert generations.drain(0.05) == 2  # the limit passes with both still running: they are aborted
    assert not generations.start()  # refused once the shutdown began
    finishers = [threading.Timer(delay, generations.end) for delay in (0.1, 0.2)]
    for finisher in finishers:
        finisher.start()
    started = time.monotonic()
    assert generations.drain(30) == 0 and time.monotonic() - started < 10  # ends when the last one does


@pytest.mark.parametrize("name", SGLANG_RECIPES)
def test_every_sglang_recipe_command_line_is_taken_and_fits_eight_gpus(name):
    found = RECIPES[name]
    argv = command_line(found, {"--context-length": 2048, "--mamba-full-memory-ratio": "0.9"}, VALUES, 0)
    assert list(argv[:2]) == ["sglang", "serve"]  # the recipe's program: the SGLang image has no entry point
    args = engine_standin.sglang_parser().parse_args(argv[2:])
    assert (args.model, args.served_model_name, args.host, args.port) == (VALUES["model_path"], ["kimi-k3"],
                                                                            "10.0.0.1", 8000)
    assert args.max_model_len == 2048 and args.tensor_parallel_size == 8
    assert engine_standin.world_size_error(args, GPUS) is None
    assert engine_standin.world_size_error(args, GPUS[:4]) is not None


def test_a_flag_sglang_does_not_know_is_refused(capsys):
    with pytest.raises(SystemExit) as refused:
        engine_standin.sglang_parser().parse_args(["--model-path", "/m", "--tensor-parallel-size", "8"])
    assert refused.value.code == 2
    assert "sglang serve: error: unrecognized arguments: --tensor-parallel-size" in capsys.readouterr().err


def test_sglangs_drain_takes_new_requests_and_waits_for_every_one_with_no_limit():
    """As SGLang's sigterm_watchdog: requests still come in while it drains; it exits once none is left."""
    generations = engine_standin.Generations()
    assert generations.start()
    drained = threading.Thread(target=generations.drain_as_sglang, kwargs={"poll": 0.05})
    drained.start()
    time.sleep(0.2)
    assert drained.is_alive() and generations.start()  # still draining, and still taking requests
    generations.end()
    time.sleep(0.2)
    assert drained.is_alive()  # one left
    generations.end()
    drained.join(5)
    assert not drained.is_alive()
