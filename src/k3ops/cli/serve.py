"""`k3ops serve status|chat INVENTORY`: each host's engine, the revision it serves, its health and load."""

from __future__ import annotations

import shlex

from ..engines.units import engine_urls
from ..facts.engine import EngineMetrics, EngineState
from ..onhost import layout
from ..remote import on_hosts
from ..settings import settings_of
from .output import add_inventory_command, print_messages, print_results


def number(value: float | None, percent: bool = False) -> str:
    return "-" if value is None else (f"{value:.0%}" if percent else f"{value:.0f}")


STATUS_COLUMNS = [
    ("HOST", lambda row: row["host"]),
    ("UNIT", lambda row: row["unit"]),
    ("REVISION", lambda row: (row["revision"] or "-").rsplit("/", 1)[-1][:12]),
    ("HEALTH", lambda row: "ok" if row["ready"] else row["detail"]),
    ("RUNNING", lambda row: number(row["requests_running"])),
    ("WAITING", lambda row: number(row["requests_waiting"])),
    ("KV CACHE", lambda row: number(row["kv_cache_usage"], percent=True)),
]


def register(verbs) -> None:
    serve = verbs.add_parser("serve", help="the engines serving the model")
    commands = serve.add_subparsers(dest="serve_command", required=True)
    add_inventory_command(commands, "status", show_status, "unit state, revision served, health, load, KV cache",
                          rows=True)
    chat = add_inventory_command(commands, "chat", chat_with_engines,
                                 "one chat completion from every engine, through its API")
    chat.add_argument("--message", default="Hello!")


def runs_an_engine(data: dict) -> bool:
    return settings_of(data).engine.engine is not None


def urls(data: dict) -> tuple[dict, str]:
    """The engine's URLs as seen on the host itself, and the name it serves the model under."""
    settings = settings_of(data)
    return engine_urls(settings.engine.engine), settings.model.model.name


def show_status(args) -> int:
    def status(host) -> dict:
        found, served = urls(host.data)
        state = host.get_fact(EngineState, health_url=found["health_url"], models_url=found["models_url"],
                              served_name=served)
        return {**state, **host.get_fact(EngineMetrics, metrics_url=found["metrics_url"])}

    return print_results(on_hosts(args.inventory, runs_an_engine, status), STATUS_COLUMNS, args.json)


def chat_with_engines(args) -> int:
    """Each engine's answer to one chat message, asked on the host itself (the API may listen on loopback)."""
    def ask(host) -> str:
        found, served = urls(host.data)
        answer = host.check_output(shlex.join([layout.WATCHDOG_COMMAND, "--url", found["health_url"], "--served-name",
                                               served, "--chat", found["chat_url"], "--message", args.message]))
        return answer.strip()

    results = on_hosts(args.inventory, runs_an_engine, ask)
    return print_messages(results) or (0 if results else 1)
