"""The lab's Prometheus and Alertmanager (Debian's packages) on the controller, watching a lab inventory's hosts
over the lab network with the files `k3ops monitoring config` writes for it, so that a drill sees an alert fire
and resolve as a site's Prometheus would.

The rules, their `for:` windows, the targets and the Alertmanager configuration are the generated ones; only the
global intervals are the lab's: a second instead of dcgm-exporter's 30 s, so a drill waits on the fault and not
on the clock (a site sets its own globals the same way). Started by the modules that watch, stopped when they end
and by `k3ops lab down`.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from . import services, state

PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
LAB_INTERVAL = "1s"
LAB_CONFIG = "lab-prometheus.yml"


def directory() -> Path:
    return state.STATE_DIR / "monitoring"


def prometheus_url() -> str:
    return f"http://{state.CONTROLLER_ADDRESS}:{PROMETHEUS_PORT}"


def alertmanager_url() -> str:
    return f"http://{state.CONTROLLER_ADDRESS}:{ALERTMANAGER_PORT}"


def watch(inventory: Path) -> None:
    """Prometheus and Alertmanager watching `inventory`'s hosts: its files (re)written, Prometheus reloaded."""
    from k3ops.cli import main as k3ops

    out = directory()
    status = k3ops(["monitoring", "config", str(inventory), "--out", str(out),
                    "--alertmanager", f"{state.CONTROLLER_ADDRESS}:{ALERTMANAGER_PORT}"])
    if status != 0:
        raise RuntimeError(f"k3ops monitoring config {inventory} failed ({status})")
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": LAB_INTERVAL, "scrape_timeout": LAB_INTERVAL,
                        "evaluation_interval": LAB_INTERVAL}
    (out / LAB_CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    reloaded = services.start_monitoring(out / LAB_CONFIG, out / "alertmanager.example.yml", out / "data",
                                         PROMETHEUS_PORT, ALERTMANAGER_PORT)
    if reloaded:
        urllib.request.urlopen(urllib.request.Request(f"{prometheus_url()}/-/reload", method="POST"), timeout=10)
    services.wait_until_listening((PROMETHEUS_PORT, ALERTMANAGER_PORT), timeout=30.0)
    for url in (prometheus_url(), alertmanager_url()):
        wait(lambda url=url: _get(f"{url}/-/ready", raw=True) is not None, 30, f"{url} ready")


def stop() -> None:
    services.stop_monitoring()


def _get(url: str, raw: bool = False):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
    except OSError:
        return None
    return body if raw else json.loads(body)


def alerts() -> list[dict]:
    """Prometheus' alerts now, pending and firing: each its labels (alertname, runbook, host...) and state."""
    found = _get(f"{prometheus_url()}/api/v1/alerts")
    return [{**alert["labels"], "state": alert["state"]} for alert in (found or {}).get("data", {}).get("alerts", [])]


def received() -> list[dict]:
    """The alerts Alertmanager holds now: each its labels, and its state there (`active`: it would be sent;
    `suppressed`: an inhibition or a silence holds it back)."""
    return [{**alert["labels"], "state": alert["status"]["state"]}
            for alert in _get(f"{alertmanager_url()}/api/v2/alerts") or []]


def rule_groups() -> list[dict]:
    """Prometheus' rule groups as its API reports them: each its rules, last evaluation and its time (seconds)."""
    return (_get(f"{prometheus_url()}/api/v1/rules") or {}).get("data", {}).get("groups", [])


def query(expression: str) -> list[dict]:
    """An instant PromQL query's series: each its labels and value."""
    found = _get(f"{prometheus_url()}/api/v1/query?{urllib.parse.urlencode({'query': expression})}")
    return [{**result["metric"], "value": float(result["value"][1])}
            for result in (found or {}).get("data", {}).get("result", [])]


def wait(condition, timeout: float, what: str, every: float = 0.5):
    """Poll `condition` until it returns something true; that value, or an error naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(every)
