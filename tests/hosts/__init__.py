"""The host checks, shipped as k3ops.host_checks: pytest and testinfra over an inventory's hosts."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def command(inventory: str, *pytest_args: str, module: str | None = None) -> list[str]:
    """pytest over these checks (`module`: one file of them, like test_nvidia.py) for an inventory;
    `pytest_args` may add the checks' own --limit HOST and --data KEY=VALUE."""
    checks = Path(__file__).parent
    # The checks' own directory is pytest's root, so no configuration from where the command runs applies;
    # testinfra's plugin stays off (the checks make their hosts from the inventory).
    return [sys.executable, "-m", "pytest", str(checks / module) if module else str(checks), "--rootdir", str(checks),
            "-c", os.devnull, "-p", "no:cacheprovider", "-p", "no:pytest11.testinfra", "-p", "no:anyio",
            "--inventory", str(Path(inventory).resolve()), *pytest_args]
