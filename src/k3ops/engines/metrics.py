"""The engine metrics an operator looks at first, read from each engine's Prometheus page.

Names differ by engine and by version (vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc);
each quantity lists the names it may have, newest first.
"""

from __future__ import annotations

import re

QUANTITIES = {
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),
}
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def key_metrics(page: str) -> dict[str, float | None]:
    """Running and waiting requests and KV cache use (0..1), summed over the page's series."""
    samples: dict[str, float] = {}
    for line in page.splitlines():
        sample = SAMPLE.match(line)
        if sample and not line.startswith("#"):
            samples[sample["name"]] = samples.get(sample["name"], 0.0) + float(sample["value"])
    return {quantity: next((samples[name] for name in names if name in samples), None)
            for quantity, names in QUANTITIES.items()}
