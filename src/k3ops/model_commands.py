"""`k3ops model status|verify|rollback INVENTORY`: the checkpoint on every host, seen and steered from one place."""

from __future__ import annotations

import json
import shlex

from . import table
from .deploys.checkpoint import CONFIG_DIR
from .facts.checkpoint import CHECKPOINT_COMMAND
from .remote import Outcome, as_root, run_on_hosts
from .spec.host import GpuHostSpec
from .spec.model import ModelHostSpec


def _model(data: dict) -> ModelHostSpec | None:
    spec = ModelHostSpec.model_validate(data)
    return spec if spec.model is not None else None


def _as_service_user(data: dict, arguments: str) -> str:
    user = GpuHostSpec.model_validate(data).service_user
    return as_root(f"runuser -u {shlex.quote(user)} -- {CHECKPOINT_COMMAND} {arguments}")


def status(inventory: str) -> tuple[list[dict], list[Outcome]]:
    """One row per host serving a model, and the hosts that could not say."""
    def command(data):
        spec = _model(data)
        return None if spec is None else f"{CHECKPOINT_COMMAND} status {shlex.quote(spec.model_cache_path)}"

    rows, failed = [], []
    for outcome in run_on_hosts(inventory, command):
        if not outcome.ok:
            failed.append(outcome)
            continue
        spec = _model(outcome.data)
        state = json.loads(outcome.stdout).get(spec.model.name, {})
        rows.append({"host": outcome.host, "model": spec.model.name, "pinned": spec.model.revision, **state})
    return rows, failed


def format_status(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        total, done = row.get("bytes_total") or 0, row.get("bytes_done") or 0
        bad = row.get("bad_files") or []
        pinned = "yes" if row.get("active") == row["pinned"] else row["pinned"][:12]
        if pinned != "yes" and row.get("target") == row["pinned"]:
            pinned += " (staged)"
        lines.append((
            row["host"], row["model"], (row.get("active") or "-")[:12], pinned, row.get("phase", "-"), f"{_size(done)}/{_size(total)}" if total else "-",
            f"{_size(row.get('rate_bytes_per_s') or 0)}/s", f"{len(bad)} bad files" if bad else row.get("verification", "-"),
            _size(row.get("free_bytes") or 0),
        ))
    return table.render(("HOST", "MODEL", "ACTIVE", "PINNED", "PHASE", "DONE", "RATE", "VERIFIED", "FREE"), lines)


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f}{unit}" if unit == "B" else f"{count:.1f}{unit}"
        count /= 1024
    raise AssertionError


def rollback(inventory: str) -> list[Outcome]:
    def command(data):
        spec = _model(data)
        return None if spec is None else _as_service_user(data, f"rollback {CONFIG_DIR}/{spec.model.name}.json")

    return run_on_hosts(inventory, command)


def verify(inventory: str) -> list[Outcome]:
    def command(data):
        spec = _model(data)
        return None if spec is None else as_root(f"systemctl start k3ops-model-verify@{spec.model.name}.service")

    return run_on_hosts(inventory, command)
