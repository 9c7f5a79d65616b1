"""The `k3ops` command line: one module per verb, each adding its own parser and handler.

Other installed distributions add verbs of their own under the `k3ops.commands` entry point group (a
`register(verbs)` function each): the lab's distribution adds `k3ops lab`, which k3ops itself neither
ships nor imports. One that fails to load is named on stderr and left out: the doctor still runs during an
incident when a plugin is broken.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from . import check, doctor, model, nccl, serve, upgrade, validate

VERBS = (validate, check, nccl, doctor, model, serve, upgrade)
COMMANDS_GROUP = "k3ops.commands"
# Bad input (k3ops.inventory.BadInput, invalid host data): argparse's usage error status, unless a verb
# documents its own (`set_defaults(bad_input_exit=N)`, as the doctor's 3).
BAD_INPUT_EXIT = 2


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="k3ops", description="Provision and run Kimi K3 on a bare-metal GPU fleet.")
    verbs = top.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        verb.register(verbs)
    for command in entry_points(group=COMMANDS_GROUP):
        try:
            command.load()(verbs)
        except Exception as error:  # noqa: BLE001: another distribution's bug must not take k3ops' own verbs down
            print(f"k3ops: the {command.name!r} verb of {command.value} is left out: it failed to load: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
    return top


def main(argv: list[str] | None = None) -> int:
    from pyinfra.api.exceptions import InventoryError

    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except InventoryError as error:  # no host was asked: the inventory or --limit cannot be used as given
        print(f"k3ops {args.command}: {error}", file=sys.stderr)
        return getattr(args, "bad_input_exit", BAD_INPUT_EXIT)
    except (RuntimeError, ValueError) as error:
        print(f"k3ops {args.command}: {error}", file=sys.stderr)
        return 1
