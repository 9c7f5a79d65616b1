"""Facts about the engine a host serves: its unit, the revision it loaded, its readiness and its load."""

from __future__ import annotations

import json
import re

from pyinfra.api import FactBase, QuoteString, StringCommand
from typing_extensions import override

from k3ops.onhost.layout import WATCHDOG_COMMAND

# The metrics an operator looks at first. Names differ by engine and by version (vLLM renamed
# gpu_cache_usage_perc to kv_cache_usage_perc); each quantity lists the names it may have, newest first.
METRIC_NAMES = {
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                       "llamacpp:kv_cache_usage_ratio"),
}
METRIC_SAMPLE_REGEX = r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)"


class EngineState(FactBase[dict]):
    """
    Returns the engine unit's state, the revision directory its last start loaded (``None`` before
    the first), and whether it answers its health endpoint and lists the served model; given
    ``chat_url`` and ``probe_seconds``, also whether a ready engine generated one token in that time
    (``generation``, ``None`` when it is not ready: /health answers even while generation is stuck):

    .. code:: python

        {"unit": "active", "revision": "/srv/k3ops/models/kimi-k3/revisions/0123...", "ready": True,
         "detail": "healthy", "generation": {"answered": True, "seconds": 0.4, "detail": "generated one token"}}
    """

    @override
    def command(self, health_url: str, models_url: str | None, served_name: str, chat_url: str | None = None,
                probe_seconds: int | None = None):
        check = ["--check", "--url", health_url, "--served-name", served_name]
        if models_url:
            check += ["--models-url", models_url]
        if chat_url and probe_seconds:
            check += ["--chat", chat_url, "--probe", str(int(probe_seconds))]
        return StringCommand(WATCHDOG_COMMAND, *(QuoteString(word) for word in check))

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return WATCHDOG_COMMAND

    @staticmethod
    def default():
        return {"unit": "unknown", "revision": None, "ready": False, "detail": "not installed"}

    @override
    def process(self, output):
        return json.loads("\n".join(output))


class EngineMetrics(FactBase[dict]):
    """
    Returns running and waiting requests and KV cache use (0..1), summed over the metrics page's
    series (``None`` for a quantity the page does not show):

    .. code:: python

        {"requests_running": 3.0, "requests_waiting": 0.0, "kv_cache_usage": 0.25}
    """

    @override
    def command(self, metrics_url: str):
        return StringCommand(WATCHDOG_COMMAND, "--url", QuoteString(metrics_url), "--metrics",
                             QuoteString(metrics_url))

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return WATCHDOG_COMMAND

    @staticmethod
    def default():
        return dict.fromkeys(METRIC_NAMES)

    @override
    def process(self, output):
        samples: dict[str, float] = {}
        for line in output:
            sample = re.match(METRIC_SAMPLE_REGEX, line)
            if sample and not line.startswith("#"):
                samples[sample["name"]] = samples.get(sample["name"], 0.0) + float(sample["value"])
        return {quantity: next((samples[name] for name in names if name in samples), None)
                for quantity, names in METRIC_NAMES.items()}
