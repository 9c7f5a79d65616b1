"""What an engine's or fabric manager's log says, named: the regexes the doctor reads their journals with.

Each regex matches the words of the program that prints them, as its source (cited) spells them, in any
version on record; a traceback's source lines count, since vLLM's excerpts quote the raise as often as the
message.
"""

from __future__ import annotations

import re

ENGINE_LOG_PATTERNS = {
    # PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp), raised as torch.OutOfMemoryError
    # (torch.cuda.OutOfMemoryError before 2.5): "CUDA out of memory. Tried to allocate 2.00 GiB"; "HIP" on ROCm.
    "cuda-oom": r"torch\.(?:cuda\.)?OutOfMemoryError|(?:CUDA|HIP) out of memory",
    # vLLM found no room for the KV cache after loading the weights: no block at all (V0 vllm/worker/worker.py
    # raise_if_cache_size_invalid, V1 vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory), or not
    # enough for one request of the model's max seq len (V1, "KV Cache" in early releases; V0's wording second).
    # SGLang's scheduler retracting requests when its pool fills (docs.sglang.io hyperparameter_tuning).
    "no-kv-cache-memory": (
        r"No available memory for the cache blocks"
        r"|(?i:larger than the available KV cache memory)"
        r"|larger than the maximum number of tokens that can be stored in KV cache"
        r"|KV cache pool is full"
    ),
    # vLLM's start-up guard (vllm/v1/worker/gpu_worker.py init_device, later vllm/v1/worker/utils.py
    # request_memory): another process holds GPU memory. Not its healthy report of the same figures, "Free
    # memory on device (139.21/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB)."
    "free-memory-at-start": r"Free memory on device .*on startup is less than desired GPU memory utilization",
    # PyTorch's NCCL watchdog (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): "[Rank 0] Watchdog caught
    # collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, ...) ran for 600060 milliseconds".
    "nccl-timeout": r"Watchdog caught collective operation timeout",
    # vLLM's and SGLang's NCCL wrappers (vllm/distributed/device_communicators/pynccl_wrapper.py NCCL_CHECK:
    # "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", raised from
    # the frame 'pynccl_wrapper.py", line 277, in ncclCommInitRank' as vLLM's troubleshooting.md shows it) and
    # PyTorch's DistBackendError ("NCCL error in: .../ProcessGroupNCCL.cpp"). That frame, not NCCL's own
    # "ncclCommInitRank comm 0x... Init COMPLETE" of a healthy start.
    "nccl-error": r"\bNCCL error\b|, in ncclCommInitRank\b",
    # vLLM's tool parsers, when the model's tool-call markup does not parse (logger.exception in each parser,
    # vllm/entrypoints/openai/tool_parsers/kimi_k2_tool_parser.py and hermes_tool_parser.py among them).
    "tool-call-parse": r"Error in extracting tool call from response|Error trying to handle streaming tool call",
    # A start's slow phases, as vLLM 0.10.2 logs them (vllm/vllm-0.10.2_startup-success capture): weight
    # loading, torch.compile, CUDA graph capture, and the engine's whole initialisation.
    "cold-start": (
        r"Loading weights took|Model loading took|torch\.compile takes|Capturing CUDA graphs"
        r"|Graph capturing finished|init engine \(profile, create kv cache, warmup model\) took"
    ),
    # The end of a start: the API server took its first request (vLLM's Uvicorn, "INFO:     Application startup
    # complete.", the vllm/vllm-0.10.2_startup-success capture's last line). An engine that said so since its
    # unit's last start and no longer answers is stuck, not loading.
    "engine-ready": r"\bApplication startup complete\.",
    # vLLM V1's engine core process is gone (vllm/v1/engine/exceptions.py EngineDeadError, "EngineCore
    # encountered an issue"; vllm/v1/engine/core_client.py: "Engine core proc EngineCore_DP0 died unexpectedly,
    # shutting down client.", since reworded "engine core exited unexpectedly; starting cleanup").
    "engine-dead": r"EngineDeadError|Engine core proc \S+ died unexpectedly|engine core exited unexpectedly",
}

FABRIC_MANAGER_LOG_PATTERNS = {
    # No NVSwitch to manage (fabricmanager/journal_..._nv-warn-nothing-to-do capture; nccl-runbooks.md B5):
    # fabric manager exits 1, which is no error on PCIe or NVLink-bridge boards.
    "nothing-to-do": r"NV_WARN_NOTHING_TO_DO",
    # Fewer NVSwitches than the board has, one missing or failed (leptonai/gpud
    # components/accelerator/nvidia/fabric-manager/log_matcher.go; nccl-runbooks.md B5).
    "topology-mismatch": r"don't match with any supported system topology",
    # NVSwitch SXid errors, "detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id ..." and the
    # non-fatal ones of the fabricmanager-log_535.161.08 capture (gpud log_matcher.go has both).
    "nvswitch-fatal": r"detected NVSwitch fatal error",
    "nvswitch-non-fatal": r"detected NVSwitch non-fatal error",
    # Fabric manager's version differs from the loaded driver's: "fabric manager NVIDIA GPU driver interface
    # version 580.126.09 don't match with driver version 580.105.08" (FMGpuDriverVersionCheck; the lab's
    # lab/src/k3ops_lab/sim/daemons.py FM_VERSION_MISMATCH copies it).
    "driver-version-mismatch": r"don't match with driver version",
}


def log_findings(lines: list[str], patterns: dict[str, str]) -> list[tuple[str, str]]:
    """Each pattern the lines show, in ``patterns``' order, with the last line that shows it: the latest
    state, and the line to quote as evidence."""
    last = {}
    for line in lines:
        for name, regex in patterns.items():
            if re.search(regex, line):
                last[name] = line
    return [(name, last[name]) for name in patterns if name in last]
