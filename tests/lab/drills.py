"""Running a runbook as an on-call engineer would, for the lab's drills: `k3ops doctor` on an inventory, a
runbook's Remedy or Verify steps as written in its file, on the affected host or the controller, and the alerts
the lab's Prometheus raises meanwhile."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from k3ops.doctor.runbooks import runbooks
from k3ops.monitoring.alerts import ALERTS
from k3ops.onhost.layout import METRICS_SERVICE
from k3ops_lab import monitoring

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


# How long Prometheus may take to show what a host's exporters serve: a scrape and an evaluation (a second each in
# the lab), with room for a busy 2-core controller.
ALERT_SECONDS = 30


def scraped_now(host: str) -> None:
    """k3ops' series of `host` written afresh (its timer would, within 30 s) and scraped by Prometheus."""
    started = on_host(host, f"date +%s.%N && systemctl start {METRICS_SERVICE}").stdout.split()[0]
    monitoring.wait(lambda: [series for series in monitoring.query(f'k3ops_metrics_timestamp_seconds{{host="{host}"}}')
                             if series["value"] >= float(started)], ALERT_SECONDS, f"fresh k3ops series of {host}")


def alerts_of(runbook: str, host: str) -> list[dict]:
    return [alert for alert in monitoring.alerts() if alert.get("runbook") == runbook and alert.get("host") == host]


def assert_alerted(runbook: str, host: str) -> list[dict]:
    """An alert naming `runbook` on `host`: firing where its rule has no `for:`, pending where the rule waits
    minutes before it fires (the drill sees the expression match and the labels, not the clock run out)."""
    scraped_now(host)
    waits = {alert.name: alert.for_ != "0m" for alert in ALERTS if alert.runbook == runbook}
    found = monitoring.wait(lambda: [alert for alert in alerts_of(runbook, host)
                                     if alert["state"] == "firing" or waits[alert["alertname"]]],
                            ALERT_SECONDS, f"alert naming {runbook} on {host}")
    return found


def assert_resolved(runbook: str, host: str) -> None:
    scraped_now(host)
    monitoring.wait(lambda: not alerts_of(runbook, host), ALERT_SECONDS, f"end of the {runbook} alert on {host}")


def assert_watched(host: str, jobs: tuple[str, ...]) -> None:
    """Prometheus scrapes the host's exporters again (a Remedy that restarts DCGM or reboots leaves them running)."""
    monitoring.wait(lambda: {series["job"] for series in monitoring.query(f'up{{host="{host}"}} == 1')} >= set(jobs),
                    ALERT_SECONDS, f"{', '.join(jobs)} of {host} scraped")
