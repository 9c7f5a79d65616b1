"""The log patterns name what each real engine and fabric manager capture shows, and nothing it does not."""

import pytest

from k3ops.doctor.log_patterns import ENGINE_LOG_PATTERNS, FABRIC_MANAGER_LOG_PATTERNS, log_findings
from k3ops_lab.sim.daemons import FM_VERSION_MISMATCH

from ..conftest import REAL_FIXTURES, real_output

# Both sets on every capture: an engine pattern must not fire on fabric manager's words, nor the reverse.
ALL_PATTERNS = {**ENGINE_LOG_PATTERNS, **FABRIC_MANAGER_LOG_PATTERNS}
CAPTURES = sorted(f"{folder}/{path.name}" for folder in ("vllm", "fabricmanager")
                  for path in (REAL_FIXTURES / folder).glob("*.txt"))
HEALTHY_START = "vllm/vllm-0.10.2_startup-success_h200-tp2_qwen3-next-80b.txt"
# What each capture shows, read off the capture itself.
SHOWN = {
    HEALTHY_START: {"cold-start", "engine-ready"},
    "vllm/vllm-metrics_prometheus_v0-names_qwen2.5-coder-32b_excerpt.txt": set(),
    "vllm/vllm-v0-0.6.4_no-available-memory-for-cache-blocks_excerpt.txt": {"no-kv-cache-memory"},
    "vllm/vllm-v1_no-available-memory-for-cache-blocks_h100_gpt-oss-120b_excerpt.txt": {"no-kv-cache-memory"},
    "fabricmanager/fabricmanager-log_535.161.08_hgx-h100_startup-and-multicast.txt": {"nvswitch-non-fatal"},
    "fabricmanager/journal_nvidia-fabricmanager_fail_nv-warn-nothing-to-do_no-nvswitch.txt": {"nothing-to-do"},
    "fabricmanager/journalctl-xeu_nvidia-fabricmanager_start-stop_pre-nvl5_h20.txt": set(),
    "fabricmanager/systemctl-status_nvidia-fabricmanager_active_nvl5-nvlsm_bottlerocket.txt": set(),
}
# The patterns no capture shows, each on a line in its program's words: quoted from a public report or
# documentation where one was found (nccl-runbooks.md B7/B8 cite them), else the source's message.
WORDINGS = [
    # nccl-runbooks.md B8, a vLLM load out of memory.
    ("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    # PyTorch's ROCm build (the allocator's message hipified).
    ("cuda-oom", "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB."),
    # vLLM issue report (0.8.3): the early "models's" wording.
    ("no-kv-cache-memory", "ValueError: To serve at least one request with the models's max seq len (32768), (2.00 GB "
                           "KV cache is needed, which is larger than the available KV cache memory (0.78 GB). Try "
                           "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                           "engine."),
    # V0's vllm/worker/worker.py raise_if_cache_size_invalid, its numbers filled in.
    ("no-kv-cache-memory", "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
                           "that can be stored in KV cache (1616). Try increasing `gpu_memory_utilization` or "
                           "decreasing `max_model_len` when initializing the engine."),
    # SGLang's hyperparameter tuning guide.
    ("no-kv-cache-memory", "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.9998 -> "
                           "1.0000"),
    # nccl-runbooks.md B8.
    ("free-memory-at-start", "ValueError: Free memory on device cuda:0 (104.87/121.63 GiB) on startup is less than "
                             "desired GPU memory utilization (0.87, 105.82 GiB)"),
    # nccl-runbooks.md B7 (LlamaFactory issue 7396, PyTorch issue 118369).
    ("nccl-timeout", "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
                     "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."),
    # vLLM's troubleshooting.md: the traceback's frame and its error.
    ("nccl-error", '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/'
                   'pynccl_wrapper.py", line 277, in ncclCommInitRank'),
    ("nccl-error", "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"),
    # kimi_k2_tool_parser.py's two logger.exception messages, in vLLM's log format.
    ("tool-call-parse", "ERROR 10-23 15:20:01 [kimi_k2_tool_parser.py:121] Error in extracting tool call from "
                        "response."),
    ("tool-call-parse", "ERROR 10-23 15:20:02 [kimi_k2_tool_parser.py:398] Error trying to handle streaming tool "
                        "call."),
    # vLLM 0.11 reports (core_client.py), and V1's exception with its message.
    ("engine-dead", "ERROR 12-01 23:08:02 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, "
                    "shutting down client."),
    ("engine-dead", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                    "(above) for the root cause."),
    # gpud's log_matcher.go examples.
    ("topology-mismatch", "[Sep 08 2025 23:21:50] [ERROR] detected number of NVSwitches don't match with any "
                          "supported system topology, aborting fabric manager"),
    ("nvswitch-fatal", "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on "
                       "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33"),
    # Fabric manager's own words, as the lab copies them.
    ("driver-version-mismatch", FM_VERSION_MISMATCH.format(fm="580.126.09", driver="580.105.08")),
]


def test_every_capture_is_accounted_for():
    assert sorted(SHOWN) == CAPTURES


@pytest.mark.parametrize("capture", CAPTURES)
def test_each_capture_yields_the_patterns_it_shows(capture):
    found = log_findings(real_output(capture).splitlines(), ALL_PATTERNS)
    assert {name for name, _ in found} == SHOWN[capture]


def test_a_healthy_start_is_a_cold_start_that_ended_ready_and_quotes_its_last_phase():
    assert log_findings(real_output(HEALTHY_START).splitlines(), ENGINE_LOG_PATTERNS) == [
        ("cold-start", "(EngineCore_DP0 pid=1805889) INFO 10-23 15:14:56 [core.py:218] init engine (profile, "
                       "create kv cache, warmup model) took 37.74 seconds"),
        ("engine-ready", "(APIServer pid=1804347) INFO:     Application startup complete.")]


def test_a_pattern_is_quoted_by_its_last_line():
    lines = real_output("vllm/vllm-v0-0.6.4_no-available-memory-for-cache-blocks_excerpt.txt").splitlines()
    assert log_findings(lines, ENGINE_LOG_PATTERNS) == [("no-kv-cache-memory", lines[-1])]
    assert lines[-1].endswith("ValueError: No available memory for the cache blocks. Try increasing "
                              "`gpu_memory_utilization` when initializing the engine.")


@pytest.mark.parametrize("name, line", WORDINGS)
def test_each_pattern_knows_its_programs_words(name, line):
    assert log_findings([line], ALL_PATTERNS) == [(name, line)]


def test_every_pattern_is_shown_somewhere():
    shown = set().union(*SHOWN.values()) | {name for name, _ in WORDINGS}
    assert shown == set(ALL_PATTERNS)
