"""`k3ops model status|verify|rollback INVENTORY`: the pinned checkpoint on every host, seen and steered from one place."""

from __future__ import annotations

import shlex

from ..facts.checkpoint import ModelCheckpoints
from ..onhost import layout
from ..doctor.runbooks import runbooks
from ..remote import CommandFailed, on_hosts
from ..settings import settings_of
from .output import add_inventory_command, print_messages, print_results

CORRUPT_RUNBOOK = "checkpoint-corrupt"
STATUS_COLUMNS = [
    ("HOST", lambda row: row["host"]),
    ("MODEL", lambda row: row["model"]),
    ("ACTIVE", lambda row: (row.get("active") or "-")[:12]),
    ("PINNED", lambda row: pinned(row)),
    ("PHASE", lambda row: row.get("phase", "-")),
    ("DONE", lambda row: f"{size(row.get('bytes_done') or 0)}/{size(row['bytes_total'])}" if row.get("bytes_total")
     else "-"),
    ("RATE", lambda row: f"{size(row.get('rate_bytes_per_s') or 0)}/s"),
    ("VERIFIED", lambda row: f"{len(row['bad_files'])} bad files" if row.get("bad_files")
     else row.get("verification", "-")),
    ("FREE", lambda row: size(row.get("free_bytes") or 0)),
    ("STAGED", lambda row: (row.get("staged") or "-")[:12]),  # by a model rollout, beside the active revision
]


def register(verbs) -> None:
    model = verbs.add_parser("model", help="the pinned checkpoint on every host of an inventory")
    commands = model.add_subparsers(dest="model_command", required=True)
    add_inventory_command(commands, "status", show_status, "active and staged revision, progress, verification",
                          rows=True)
    add_inventory_command(commands, "verify", verify,
                          "re-hash every host's active revision now (bad files: the next deploy repairs)")
    add_inventory_command(commands, "rollback", rollback,
                          "make the previous revision active again on every host (one rename)")


def serves_a_model(data: dict) -> bool:
    return settings_of(data).model.model is not None


def show_status(args) -> int:
    def status(host) -> dict:
        spec = settings_of(host.data).model
        state = host.get_fact(ModelCheckpoints, cache_path=spec.model_cache_path).get(spec.model.name, {})
        return {"model": spec.model.name, "pinned": spec.model.revision, **state}

    return print_results(on_hosts(args.inventory, serves_a_model, status), STATUS_COLUMNS, args.json)


def verify(args) -> int:
    def start_verification(host) -> str:
        spec = settings_of(host.data).model
        ok, _, _ = host.run(f"systemctl start {layout.instance(layout.VERIFY_UNIT_TEMPLATE, spec.model.name)}")
        state = host.get_fact(ModelCheckpoints, cache_path=spec.model_cache_path).get(spec.model.name, {})
        if ok and not state.get("bad_files"):
            return "verified"
        if state.get("bad_files"):
            raise CommandFailed(f"{len(state['bad_files'])} bad files in {spec.model.name}@{state.get('active')}: "
                                f"{', '.join(state['bad_files'])}; the next `pyinfra INVENTORY deploys/model.py` "
                                f"repairs them (runbook: {runbooks()[CORRUPT_RUNBOOK].location})")
        unit = layout.instance(layout.VERIFY_UNIT_TEMPLATE, spec.model.name)
        raise CommandFailed(f"the verification of {spec.model.name} did not run ({state.get('message') or 'no message'}"
                            f"): see `journalctl -u {unit}`")

    return print_messages(on_hosts(args.inventory, serves_a_model, start_verification))


def rollback(args) -> int:
    def roll_back(host) -> str:
        settings = settings_of(host.data)
        user, config = settings.gpu.service_user, layout.model_config(settings.model.model.name)
        return host.check_output(shlex.join(["runuser", "-u", user, "--", layout.CHECKPOINT_COMMAND, "rollback",
                                             config])).strip()

    return print_messages(on_hosts(args.inventory, serves_a_model, roll_back))


def pinned(row: dict) -> str:
    """yes, or the pinned revision not yet active (and whether it is staged)."""
    if row.get("active") == row["pinned"]:
        return "yes"
    return row["pinned"][:12] + (" (staged)" if row.get("target") == row["pinned"] else "")


def size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:.0f}{unit}" if unit == "B" else f"{count:.1f}{unit}"
        count /= 1024
    raise AssertionError
