"""The `k3ops` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# The checkout this command runs from: tests/hosts lives there, beside the package.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _lab_up(args) -> int:
    from .lab import lab

    started = lab.up(args.hosts, args.profile or [], nvme_size_gib=args.nvme_size_gib)
    for host in started.hosts:
        print(f"{host.name}\t{host.profile}\t{host.address}")
    return 0


def _lab_status(args) -> int:
    from .lab import lab

    hosts = lab.status()
    if args.json:
        print(json.dumps({"hosts": hosts}))
    elif not hosts:
        print("no lab is up")
    else:
        for host in hosts:
            print(f"{host['name']}\t{host['profile']}\t{host['address']}\t{host['state']}")
    return 0


def _lab_ssh(args) -> int:
    from .lab import lab, state

    current = state.load()
    if current is None:
        print("k3ops lab ssh: no lab is up (run `k3ops lab up`)", file=sys.stderr)
        return 2
    try:
        host = current.host(args.host)
    except KeyError as error:
        print(f"k3ops lab ssh: {error.args[0]}", file=sys.stderr)
        return 2
    command = lab.ssh_command(host, args.command)
    if sys.stdin.isatty() and not args.command:
        command.insert(1, "-t")
    os.execvp(command[0], command)


def _lab_down(args) -> int:
    from .lab import lab

    lab.down()
    return 0


def _validate(args) -> int:
    from pyinfra.api.exceptions import InventoryError

    from .inventory import load
    from .spec import inventory_errors

    try:
        errors = inventory_errors(load(args.inventory))
    except InventoryError as error:
        errors = [str(error)]
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"{args.inventory}: every host's data is valid")
    return 0


def _check(args) -> int:
    """The host checks of tests/hosts against an inventory, through pytest."""
    import subprocess

    checks = REPO_ROOT / "tests" / "hosts"
    command = [sys.executable, "-m", "pytest", str(checks), "--inventory", args.inventory,
               "-p", "no:cacheprovider", *args.pytest_args]
    return subprocess.run(command, cwd=REPO_ROOT).returncode


def _status(args) -> int:
    """`k3ops model status` and `k3ops serve status`: a table (or JSON) of every host, and who could not say."""
    import importlib

    commands = importlib.import_module(f"k3ops.{args.command}_commands")
    rows, failed = commands.status(args.inventory)
    print(json.dumps(rows, indent=1) if args.json else commands.format_status(rows))
    for outcome in failed:
        print(f"{outcome.host}: {outcome.stderr.strip() or 'status failed'}", file=sys.stderr)
    return 1 if failed else 0


def _model_action(args) -> int:
    from . import model_commands

    outcomes = getattr(model_commands, args.model_command)(args.inventory)
    for outcome in outcomes:
        what = (outcome.stdout + outcome.stderr).strip() or ("done" if outcome.ok else "failed")
        print(f"{outcome.host}: {what}", file=sys.stdout if outcome.ok else sys.stderr)
    return 0 if all(outcome.ok for outcome in outcomes) else 1


def _serve_chat(args) -> int:
    from .serve_commands import chat

    outcomes = chat(args.inventory, args.message)
    for outcome in outcomes:
        answer = outcome.stdout.strip() if outcome.ok else outcome.stderr.strip().splitlines()[-1:]
        print(f"{outcome.host}: {answer!r}" if outcome.ok else f"{outcome.host}: failed: {answer}",
              file=sys.stdout if outcome.ok else sys.stderr)
    return 0 if outcomes and all(outcome.ok for outcome in outcomes) else 1


def _status_parser(subcommands, help_text: str) -> None:
    status = subcommands.add_parser("status", help=help_text)
    status.add_argument("inventory")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_status)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="k3ops", description="Provision and run Kimi K3 on a bare-metal GPU fleet.")
    commands = top.add_subparsers(dest="command", required=True)
    lab_parser = commands.add_parser("lab", help="a simulated GPU fleet on this machine")
    lab_commands = lab_parser.add_subparsers(dest="lab_command", required=True)

    up = lab_commands.add_parser("up", help="start lab hosts (reuses a running lab with the same profiles)")
    up.add_argument("--hosts", type=int, default=2, help="number of hosts (default 2)")
    up.add_argument("--profile", action="append", metavar="NAME",
                    help="hardware profile for the next host, in order (repeatable); the rest get h200x8")
    up.add_argument("--nvme-size-gib", type=int, default=8, help="size of each simulated NVMe device (sparse)")
    up.set_defaults(handler=_lab_up)

    status = lab_commands.add_parser("status", help="list the lab hosts and their state")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=_lab_status)

    ssh = lab_commands.add_parser("ssh", help="run a command as root on a lab host (a shell without one)")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    ssh.set_defaults(handler=_lab_ssh)

    down = lab_commands.add_parser("down", help="stop the lab and remove all it made (idempotent)")
    down.set_defaults(handler=_lab_down)

    validate = commands.add_parser("validate", help="check an inventory's host data without connecting")
    validate.add_argument("inventory")
    validate.set_defaults(handler=_validate)

    model = commands.add_parser("model", help="the pinned checkpoint on every host of an inventory")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    _status_parser(model_commands, "active and staged revision, progress, verification")
    for name, help_text in (("verify", "re-hash every host's active revision now (bad files: the next deploy repairs)"),
                            ("rollback", "make the previous revision active again on every host (one rename)")):
        action = model_commands.add_parser(name, help=help_text)
        action.add_argument("inventory")
        action.set_defaults(handler=_model_action)

    serve = commands.add_parser("serve", help="the engines serving the model")
    serve_commands = serve.add_subparsers(dest="serve_command", required=True)
    _status_parser(serve_commands, "unit state, revision served, health, load, KV cache")
    serve_chat = serve_commands.add_parser("chat", help="one chat completion from every engine, through its API")
    serve_chat.add_argument("inventory")
    serve_chat.add_argument("--message", default="Hello!")
    serve_chat.set_defaults(handler=_serve_chat)

    check = commands.add_parser("check", help="run the host checks (tests/hosts) against an inventory")
    check.add_argument("inventory")
    check.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest (e.g. -k nvidia)")
    check.set_defaults(handler=_check)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "lab" and args.lab_command == "up" and args.hosts < 1:
        parser().error("--hosts must be at least 1")
    try:
        return args.handler(args)
    except (RuntimeError, ValueError) as error:
        print(f"k3ops {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
