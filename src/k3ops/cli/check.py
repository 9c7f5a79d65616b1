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
    check.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest (e.g. -k nvidia)")
    check.set_defaults(handler=run)


def run(args) -> int:
    from .. import host_checks

    checks = Path(host_checks.__file__).parent
    # The checks' own directory is pytest's root, so no configuration from where the command runs applies;
    # testinfra's plugin stays off (the checks make their hosts from the inventory).
    command = [sys.executable, "-m", "pytest", str(checks), "--rootdir", str(checks), "-c", os.devnull,
               "-p", "no:cacheprovider", "-p", "no:pytest11.testinfra", "-p", "no:anyio",
               "--inventory", str(Path(args.inventory).resolve()), *args.pytest_args]
    return subprocess.run(command).returncode
