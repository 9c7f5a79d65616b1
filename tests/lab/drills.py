"""Running a runbook as an on-call engineer would, for the lab's drills: `k3ops doctor` on an inventory, and a
runbook's Remedy or Verify steps as written in its file, on the affected host or the controller."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from k3ops.doctor.runbooks import runbooks

from ..conftest import REPO_ROOT
from .conftest import COMMAND_TIMEOUT, k3ops, on_host, reboot


def doctor(inventory: str, *arguments: str) -> tuple[int, dict[str, dict]]:
    """`k3ops doctor --json`: its exit status, and each host's report by name."""
    result = k3ops("doctor", inventory, "--json", *arguments, check=False)
    assert result.returncode in (0, 1, 2), result.stdout + result.stderr
    return result.returncode, {host["host"]: host for host in json.loads(result.stdout)["hosts"]}


def assert_clean(inventory: str) -> None:
    status, hosts = doctor(inventory)
    assert status == 0, {name: host["findings"] or host["unchecked"] for name, host in hosts.items()}
    assert all(host["status"] == "healthy" for host in hosts.values()), hosts


def run_controller(command: str, variables: dict[str, str]) -> subprocess.CompletedProcess:
    """A runbook's controller command, in the checkout, with k3ops and pyinfra on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, env={**os.environ, **variables, "PATH": path})


def run_steps(host: str, section: str, runbook: str, variables: dict[str, str]) -> None:
    """The runbook's fenced steps of one section, as written, in order; each command must succeed."""
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in variables.items() if name != "INVENTORY")
    for step in runbooks()[runbook].steps(section):
        if step.place == "out-of-band":
            k3ops("lab", "fault", host, "--clear")
            continue
        for command in step.commands:
            if step.place == "host" and command.strip() == "systemctl reboot":
                reboot(host)
                continue
            result = (on_host(host, f"export {exports}; {command}", check=False) if step.place == "host"
                      else run_controller(command, variables))
            assert result.returncode == 0, (f"{runbook} {section}: `{command}` on {step.place}:\n"
                                            f"{result.stdout}{result.stderr}")
