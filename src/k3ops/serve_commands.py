"""`k3ops serve status INVENTORY`: each host's engine, the revision it serves, its health and load."""

from __future__ import annotations

import shlex

from . import table
from .engines.metrics import key_metrics
from .engines.recipes import RECIPES
from .engines.units import REVISION_FILE, SECRETS_FILE, UNIT, WATCHDOG, health_host
from .remote import Outcome, as_root, run_on_hosts
from .spec.engine import EngineHostSpec
from .spec.model import ModelHostSpec

SECTION = "----k3ops-section----"


def _urls(data: dict) -> tuple[str, str] | None:
    engine = EngineHostSpec.model_validate(data).engine
    if engine is None:
        return None
    base = f"http://{health_host(engine.host)}:{engine.port or RECIPES[engine.recipe].port}"
    return base, ModelHostSpec.model_validate(data).model.name


def _command(data: dict) -> str | None:
    urls = _urls(data)
    if urls is None:
        return None
    base, served = urls
    check = [WATCHDOG, "--url", f"{base}/health", "--secrets", SECRETS_FILE]
    parts = [f"systemctl is-active {UNIT}", f"cat {REVISION_FILE} 2>/dev/null || echo -",
             shlex.join([*check, "--check", "--models-url", f"{base}/v1/models", "--served-name", served]),
             shlex.join([*check, "--metrics", f"{base}/metrics"])]
    return as_root(shlex.join(["sh", "-c", f"; echo {SECTION}; ".join(parts)]))


def chat(inventory: str, message: str) -> list[Outcome]:
    """Each engine's answer to one chat message, asked on the host itself (the API may listen on loopback)."""
    def command(data: dict) -> str | None:
        urls = _urls(data)
        if urls is None:
            return None
        base, served = urls
        return as_root(shlex.join([WATCHDOG, "--url", f"{base}/health", "--secrets", SECRETS_FILE, "--served-name",
                                   served, "--chat", f"{base}/v1/chat/completions", "--message", message]))

    return run_on_hosts(inventory, command)


def status(inventory: str) -> tuple[list[dict], list[Outcome]]:
    rows, failed = [], []
    for outcome in run_on_hosts(inventory, _command):
        sections = outcome.stdout.split(SECTION + "\n")
        if len(sections) != 4:
            failed.append(outcome)
            continue
        unit, revision, ready, page = (section.strip() for section in sections)
        rows.append({"host": outcome.host, "unit": unit, "revision": revision.rsplit("/", 1)[-1],
                     "ready": ready.removeprefix("ready: "), **key_metrics(page)})
    return rows, failed


def format_status(rows: list[dict]) -> str:
    def number(value, percent=False) -> str:
        return "-" if value is None else (f"{value:.0%}" if percent else f"{value:.0f}")

    return table.render(("HOST", "UNIT", "REVISION", "HEALTH", "RUNNING", "WAITING", "KV CACHE"), [
        (row["host"], row["unit"], row["revision"][:12],
         "ok" if row["ready"].startswith("True") else row["ready"].removeprefix("False "),
         number(row["requests_running"]), number(row["requests_waiting"]), number(row["kv_cache_usage"], True))
        for row in rows])
