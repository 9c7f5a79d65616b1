"""`k3ops check INVENTORY`: the host checks (k3ops.host_checks, tests/hosts in the repository) over SSH."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def register(verbs) -> None:
    check = verbs.add_parser("check", help="run the host checks against an inventory's hosts")
    check.add_argument("inventory")
    check.add_argument("pytest_args", nargs=argparse.REMAINDER,
                       help="passed on to pytest (e.g. -k nvidia, or the checks' --limit HOST and --data KEY=VALUE)")
    check.set_defaults(handler=run)


def host_checks_command(inventory: str, *pytest_args: str, module: str | None = None) -> list[str]:
    """pytest over the shipped host checks (`module`: one file of them, like test_nvidia.py) for an inventory;
    `pytest_args` may add the checks' own --limit HOST and --data KEY=VALUE."""
    from .. import host_checks

    checks = Path(host_checks.__file__).parent
    # The checks' own directory is pytest's root, so no configuration from where the command runs applies;
    # testinfra's plugin stays off (the checks make their hosts from the inventory).
    return [sys.executable, "-m", "pytest", str(checks / module) if module else str(checks), "--rootdir", str(checks),
            "-c", os.devnull, "-p", "no:cacheprovider", "-p", "no:pytest11.testinfra", "-p", "no:anyio",
            "--inventory", str(Path(inventory).resolve()), *pytest_args]


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
    return subprocess.run(host_checks_command(args.inventory, *args.pytest_args)).returncode
