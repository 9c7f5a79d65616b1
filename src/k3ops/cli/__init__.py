"""The `k3ops` command line: one module per verb, each adding its own parser and handler.

Other installed distributions add verbs of their own under the `k3ops.commands` entry point group (a
`register(verbs)` function each): the lab's distribution adds `k3ops lab`, which k3ops itself neither
ships nor imports. One that fails to load is named on stderr and left out: the doctor still runs during an
incident when a plugin is broken.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from importlib.metadata import entry_points

VERBS = ("validate", "check", "nccl", "doctor", "model", "serve", "upgrade", "monitoring")  # this package's modules, in help order
COMMANDS_GROUP = "k3ops.commands"
# Bad input (k3ops.inventory.BadInput, invalid host data): argparse's usage error status, unless a verb
# documents its own (`set_defaults(bad_input_exit=N)`, as the doctor's 3).
BAD_INPUT_EXIT = 2


def parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Every verb's parser, or only `verb`'s when it names one: a command imports what it runs and no more (`k3ops
    lab ssh`, which the lab tests run hundreds of times, imports no pyinfra)."""
    top = argparse.ArgumentParser(prog="k3ops", description="Provision and run Kimi K3 on a bare-metal GPU fleet.")
    verbs = top.add_subparsers(dest="command", required=True)
    plugins = {command.name: command for command in entry_points(group=COMMANDS_GROUP)}
    every = verb not in (*VERBS, *plugins)
    for name in VERBS:
        if every or name == verb:
            import_module(f"{__name__}.{name}").register(verbs)
    for command in plugins.values():
        if not (every or command.name == verb):
            continue
        try:
            command.load()(verbs)
        except Exception as error:  # noqa: BLE001: another distribution's bug must not take k3ops' own verbs down
            print(f"k3ops: the {command.name!r} verb of {command.value} is left out: it failed to load: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv[0] if argv else None).parse_args(argv)
    try:
        return args.handler(args)
    except (RuntimeError, ValueError) as error:
        print(f"k3ops {args.command}: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        if not inventory_error(error):
            raise
        print(f"k3ops {args.command}: {error}", file=sys.stderr)
        return getattr(args, "bad_input_exit", BAD_INPUT_EXIT)


def inventory_error(error: Exception) -> bool:
    """Whether `error` is pyinfra's InventoryError: no host was asked, the inventory or --limit cannot be used as
    given. Only a verb that imported pyinfra can raise it, so pyinfra is not imported to ask."""
    exceptions = sys.modules.get("pyinfra.api.exceptions")
    return exceptions is not None and isinstance(error, exceptions.InventoryError)
