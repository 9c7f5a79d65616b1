"""Stopping the controller-side processes that run lab hosts (a container's supervisor, a VM's QEMU)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def pid_from_file(pid_file: Path, *markers: bytes) -> int | None:
    """The pid a pid file names while that process runs and its command line holds every marker; a stale
    pid file (the process gone, or the pid reused) names nothing."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError):
        return None
    return pid if all(marker in cmdline for marker in markers) else None


def terminate(pid_now: Callable[[], int | None], timeout: float, kill: Callable[[int], None]) -> None:
    """SIGTERM the process `pid_now()` names, and `kill(pid)` it if it is still there after `timeout`."""
    pid = pid_now()
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_now():
        time.sleep(0.2)
    if pid_now():
        kill(pid)


def kill_matching(matches: Callable[[bytes], bool]) -> None:
    """SIGKILL every process whose command line (NUL-separated, as /proc has it) `matches`."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if matches((proc / "cmdline").read_bytes()):
                    os.kill(int(proc.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass
