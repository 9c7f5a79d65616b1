"""`k3ops check INVENTORY`: the host checks (k3ops.host_checks, tests/hosts in the repository) over SSH."""

from __future__ import annotations

import argparse
import subprocess

from .. import host_checks


def register(verbs) -> None:
    check = verbs.add_parser("check", help="run the host checks against an inventory's hosts")
    check.add_argument("inventory")
    check.add_argument("pytest_args", nargs=argparse.REMAINDER,
                       help="passed on to pytest (e.g. -k nvidia, or the checks' --limit HOST and --data KEY=VALUE)")
    check.set_defaults(handler=run)


def run(args) -> int:
    """The inventory and the checks' --limit and --data are asked first, as every verb asks them: a mistyped path
    or --limit is one line and exit 2, never pytest's collection error or every check skipped and exit 0."""
    import pytest

    from ..host_checks.conftest import parse_data
    from ..inventory import BadInput, selected

    options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    options.add_argument("--limit", action="append")
    options.add_argument("--data", action="append", default=[])
    given, _ = options.parse_known_args(args.pytest_args)
    try:
        data = parse_data(given.data)
    except pytest.UsageError as error:
        raise BadInput(str(error)) from None
    selected(args.inventory, given.limit, data)
    return subprocess.run(host_checks.command(args.inventory, *args.pytest_args)).returncode
