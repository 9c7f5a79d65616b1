"""Facts about what a host's exporters serve: Prometheus' text exposition format, read as Prometheus reads it."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString, StringCommand
from typing_extensions import override

from ..onhost.layout import METRICS_COMMAND

SAMPLE_REGEX = r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?$"
LABEL_REGEX = r'\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"\s*,?'
UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


def label_values(text: str) -> dict[str, str]:
    """A sample's labels, each value unescaped (\\n, \\\\ and \\")."""
    labels, position = {}, 0
    while position < len(text):
        found = re.compile(LABEL_REGEX).match(text, position)
        if not found:
            raise ValueError(f"not a label list: {text!r}")
        labels[found["name"]] = re.sub(r"\\(.)", lambda escape: UNESCAPED.get(escape[1], escape[0]), found["value"])
        position = found.end()
    return labels


def exposition(lines: list[str]) -> dict[str, dict]:
    """A /metrics page: each family by name, its TYPE and samples (labels and value), in the page's order.

    .. code:: python

        {"DCGM_FI_DEV_GPU_TEMP": {"type": "gauge", "samples": [{"labels": {"gpu": "0", ...}, "value": 31.0}]}}
    """
    families: dict[str, dict] = {}
    for line in lines:
        line = line.strip()
        if line.startswith("# TYPE "):
            name, _, kind = line.removeprefix("# TYPE ").partition(" ")
            families.setdefault(name, {"type": "untyped", "samples": []})["type"] = kind.strip()
        elif line and not line.startswith("#") and (sample := re.match(SAMPLE_REGEX, line)):
            family = families.setdefault(sample["name"], {"type": "untyped", "samples": []})
            family["samples"].append({"labels": label_values(sample["labels"] or ""), "value": float(sample["value"])})
    return families


class ExporterMetrics(FactBase[dict | None]):
    """
    Returns what an exporter on the host serves at `url` (a /metrics page, read on the host itself), as
    `exposition` reads it; ``None`` when nothing answers there:

    .. code:: python

        {"k3ops_maintenance": {"type": "gauge", "samples": [{"labels": {"state": "", "by": ""}, "value": 0.0}]}}
    """

    @override
    def command(self, url: str):
        return StringCommand(METRICS_COMMAND, "--get", QuoteString(url), "||", "true")

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return METRICS_COMMAND

    @override
    def process(self, output):
        return exposition(output) if any(line.strip() for line in output) else None
