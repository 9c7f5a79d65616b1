"""The runbooks drilled on a lab: `k3ops doctor` on a healthy fleet, then for every runbook the lab can
inject: the fault goes in at the lowest layer, the doctor names exactly that runbook on exactly that host,
the runbook's own Remedy and Verify commands (as written in its file) bring the host back, and the
doctor is clean again. The lab's Prometheus watches throughout, with the rules `k3ops monitoring config` writes:
a healthy fleet fires nothing, each fault the exporters can see raises an alert naming the same runbook on the
same host, and the Remedy ends it; a host in maintenance pages no one until its deadline passes.

Two h200x8 hosts (one fabric-check group) and an mi355x8, each serving the tiny model with llama-server.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from k3ops.doctor.runbooks import runbooks
from k3ops.hardware import BOARD_PROFILES, GPU_MODELS
from k3ops.onhost.layout import ENGINE_UNIT, MAINTENANCE_MARKER, WATCHDOG_SERVICE, WATCHDOG_TIMER
from k3ops.monitoring.alerts import ALERTS, MAINTENANCE_ALERT
from k3ops_lab import monitoring
from k3ops_lab.faults import FAULTS

from .conftest import k3ops, lab_inventory, on_host, pyinfra, reboot
from .drills import (assert_alerted, assert_clean, assert_resolved, assert_watched, doctor, run_steps,
                     scraped_now)

LAB_PROFILES = ("h200x8", "h200x8", "mi355x8")
HOSTS = ("gpu-01", "gpu-02", "gpu-03")
FABRIC_GROUP = ("gpu-01", "gpu-02")
VENDORS = {host: GPU_MODELS[BOARD_PROFILES[profile].gpu_model].vendor for host, profile in zip(HOSTS, LAB_PROFILES)}
DRILLED = sorted(book.id for book in runbooks().values() if book.lab_fault and not book.drilled_on_vm)
# The host each fault is drilled on: the AMD host for AMD faults, the second NVIDIA host for the fabric
# (its peer in the group is then the healthy reference), the first for the rest of NVIDIA's.
DRILL_HOST = {"nvidia": "gpu-01", "amd": "gpu-03", None: "gpu-02"}
FABRIC_FAULTS = ("nic-slow", "nccl-bootstrap-blocked")
# What makes each of these faults show where the doctor reads it: the check or the verification an operator
# (or a timer) runs, as the runbook's Detect says; (command, its expected exit status).
TRIGGERS = {
    "nic-slow": (("nccl", "check", "{inventory}", "--limit", ",".join(FABRIC_GROUP)), 1),
    "nccl-bootstrap-blocked": (("nccl", "check", "{inventory}", "--limit", ",".join(FABRIC_GROUP)), 1),
    "checkpoint-byte-flip": (("model", "verify", "{inventory}"), 1),
}


# Drilled runbooks with an alert that the lab's exporters cannot raise, and why.
UNWATCHED = {
    "infiniband-port-degraded": "the lab simulates the ports for ibstat, not in sysfs where node_exporter reads them",
    "nvlink-errors": "its alert reads Xids, which the container hosts' driver does not log",
}
# Alerts that stay after the Remedy by design: none today (a windowed rule, like a new remap's hour, would be here).
STAYS_AFTER_REMEDY: dict[str, str] = {}
WATCHED = sorted({alert.runbook for alert in ALERTS} & set(DRILLED) - set(UNWATCHED))


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    inventory = lab_inventory(tmp_path_factory.mktemp("incidents") / "fleet.py",
                              per_host={name: {"nccl_group": "drill"} for name in FABRIC_GROUP},
                              nccl_timeout_seconds=30)
    deployed = pyinfra("deploys/k3.py", inventory=inventory)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    monitoring.watch(Path(inventory))
    yield inventory
    monitoring.stop()


def test_a_healthy_fleet_and_a_fresh_boot_raise_no_alarm(fleet):
    assert_clean(fleet)
    reboot("gpu-01")  # straight after a normal reboot: the engine still loading is no alarm
    status, hosts = doctor(fleet, "--limit", "gpu-01")
    assert status == 0 and hosts["gpu-01"]["findings"] == [], hosts["gpu-01"]
    table = k3ops("doctor", fleet).stdout
    assert all(f"{name}  HEALTHY" in table for name in HOSTS), table


def test_prometheus_scrapes_every_exporter_and_a_healthy_fleet_fires_nothing(fleet):
    nvidia = [host for host in HOSTS if VENDORS[host] == "nvidia"]
    amd = [host for host in HOSTS if VENDORS[host] == "amd"]
    expected = {("node", host) for host in HOSTS} | {("dcgm", host) for host in nvidia} | {
        ("amd", host) for host in amd} | {("engine", host) for host in HOSTS}  # llama-server's, with its API key
    monitoring.wait(lambda: {(series["job"], series["host"]) for series in monitoring.query("up == 1")} >= expected,
                    60, f"every exporter scraped ({sorted(expected)})")
    for host in HOSTS:
        scraped_now(host)
    gpus = {series["host"]: series["value"] for series in monitoring.query("count by (host) (DCGM_FI_DEV_GPU_TEMP)")}
    assert gpus == dict.fromkeys(nvidia, 8.0)
    assert {series["host"]: series["value"] for series in monitoring.query("gpu_nodes_total")} == dict.fromkeys(amd, 8)
    assert monitoring.alerts() == [] and monitoring.received() == []


def test_a_host_under_maintenance_reports_so_until_its_deadline_and_keeps_its_engine_stopped(fleet):
    """A marker holds the doctor's findings back while its deadline holds, and a deploy leaves the engine of a
    marked host as it is; past the deadline the doctor says nobody is working on the host, and shows the rest."""
    def mark(minutes: int) -> None:
        deadline = (datetime.now(timezone.utc) + timedelta(minutes=minutes)).isoformat(timespec="seconds")
        marker = json.dumps({"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "state": "stopped",
                             "since": "2026-12-01T14:02:11+00:00", "deadline": deadline})
        on_host("gpu-02", f"echo '{marker}' > {MAINTENANCE_MARKER}")

    on_host("gpu-02", f"systemctl disable --now {ENGINE_UNIT}")  # as a rollout's stop step leaves it
    mark(30)
    try:
        # Prometheus sees a power brake on the drained host, and Alertmanager sends nothing of it but the drain
        k3ops("lab", "fault", "gpu-02", "power-brake")
        assert_alerted("gpu-power-brake", "gpu-02")
        def at_alertmanager() -> dict[str, str] | None:
            found = {alert["alertname"]: alert["state"] for alert in monitoring.received() if alert["host"] == "gpu-02"}
            both = found.keys() >= {"K3GpuPowerBrake", MAINTENANCE_ALERT} and "unprocessed" not in found.values()
            return found if both else None

        states = monitoring.wait(at_alertmanager, 30, "both alerts of gpu-02 at Alertmanager")
        assert states == {"K3GpuPowerBrake": "suppressed", MAINTENANCE_ALERT: "active"}, states
        k3ops("lab", "fault", "gpu-02", "--clear")
        k3ops("lab", "fault", "gpu-02", "persistenced-crash")
        status, hosts = doctor(fleet)
        assert status == 0 and hosts["gpu-02"]["status"] == "maintenance"
        assert hosts["gpu-02"]["maintenance"]["reason"] == "driver upgrade to 580.126.09"
        assert "under maintenance: driver upgrade" in k3ops("doctor", fleet, "--limit", "gpu-02").stdout
        deployed = pyinfra("-v", "deploys/serving.py", "--limit", "gpu-02", inventory=fleet)
        assert deployed.returncode == 0 and "engine left as it is: the host is under maintenance" in \
            deployed.stdout + deployed.stderr, deployed.stdout[-3000:] + deployed.stderr[-3000:]
        assert on_host("gpu-02", f"systemctl is-active {ENGINE_UNIT}", check=False).stdout.strip() == "inactive"
        mark(-1)  # the controller that wrote it died a minute ago
        status, hosts = doctor(fleet, "--limit", "gpu-02")
        assert status == 1 and hosts["gpu-02"]["status"] == "warning", hosts["gpu-02"]
        findings = {finding["runbook"]: finding for finding in hosts["gpu-02"]["findings"]}
        assert set(findings) == {"host-left-in-maintenance", "persistenced-down"}, findings
        assert "has passed: nobody is working on it" in findings["host-left-in-maintenance"]["summary"]
        assert_alerted("host-left-in-maintenance", "gpu-02")  # past its deadline, the drain pages
    finally:
        on_host("gpu-02", f"rm -f {MAINTENANCE_MARKER}")
        k3ops("lab", "fault", "gpu-02", "--clear")
    restored = pyinfra("deploys/serving.py", "--limit", "gpu-02", inventory=fleet)  # the marker gone: it serves
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    assert_clean(fleet)
    assert_resolved("host-left-in-maintenance", "gpu-02")


def test_a_bad_limit_is_refused_before_any_host_is_touched(fleet):
    result = k3ops("doctor", fleet, "--limit", "gpu-09", check=False)
    assert result.returncode == 3 and "--limit: 'gpu-09' matches no host" in result.stderr


@pytest.mark.parametrize("runbook", DRILLED)
def test_drill(fleet, runbook):
    fault = FAULTS[runbooks()[runbook].lab_fault]
    host = "gpu-02" if fault.name in FABRIC_FAULTS else DRILL_HOST[fault.vendor]
    assert fault.runbook == runbook
    # The fleet is clean here: the healthy-fleet test runs first, and every drill ends clean.
    if fault.name in FABRIC_FAULTS:  # the fabric check runs on idle hosts only
        for name in FABRIC_GROUP:
            on_host(name, f"systemctl stop {ENGINE_UNIT}")
    try:
        k3ops("lab", "fault", host, fault.name)
        if fault.name in TRIGGERS:
            command, expected = TRIGGERS[fault.name]
            triggered = k3ops(*(word.format(inventory=fleet) for word in command), check=False)
            assert triggered.returncode == expected, triggered.stdout + triggered.stderr
            if fault.name == "checkpoint-byte-flip":  # it names the host, the bad file and the runbook
                assert f"{host}: 1 bad files in tiny-k3@" in triggered.stderr
                assert "tiny-k3.gguf" in triggered.stderr and "runbooks/checkpoint-corrupt.md" in triggered.stderr
        status, hosts = doctor(fleet)
        named = {name: [finding["runbook"] for finding in found["findings"]] for name, found in hosts.items()}
        # A hang is the whole group's: NCCL names no host, so neither can the doctor.
        affected = FABRIC_GROUP if fault.name == "nccl-bootstrap-blocked" else (host,)
        assert named == {name: [runbook] if name in affected else [] for name in HOSTS}, named
        finding = hosts[host]["findings"][0]
        assert status == {"warning": 1, "critical": 2}[finding["severity"]]
        assert finding["runbook_path"] == f"runbooks/{runbook}.md" and finding["evidence"]
        variables = {**finding["variables"], "HOST": host, "INVENTORY": fleet}
        if runbook in WATCHED:
            assert_alerted(runbook, host)
        run_steps(host, "Remedy", runbook, variables)
        run_steps(host, "Verify", runbook, variables)
        if fault.name in FABRIC_FAULTS:
            for name in FABRIC_GROUP:
                on_host(name, f"systemctl start {ENGINE_UNIT}")
        assert_clean(fleet)  # the runbook's own steps repaired the host: no clearing by the lab before this
        if runbook in WATCHED and runbook not in STAYS_AFTER_REMEDY:
            assert_resolved(runbook, host)
        assert_watched(host, ("node", {"nvidia": "dcgm", "amd": "amd"}[VENDORS[host]]))
    finally:
        k3ops("lab", "fault", host, "--clear")
        for name in FABRIC_GROUP if fault.name in FABRIC_FAULTS else ():
            on_host(name, f"systemctl start {ENGINE_UNIT}")



# Faults made as the world makes them, by ordinary commands and not `k3ops lab fault` (whose own faults are a
# daemon killed by SIGKILL and systemd's own SIGSTOP): a service an operator stopped, a process frozen by kill(1).
# (command, what the runbook's Remedy leaves for the operator to undo.)
WORLD_FAULTS = {
    "persistenced-down": ("systemctl stop nvidia-persistenced.service", None),
    "engine-generation-stuck": (f"systemctl stop {WATCHDOG_TIMER}; "
                                f"kill -STOP $(systemctl show -p MainPID --value {ENGINE_UNIT})",
                                f"systemctl start {WATCHDOG_TIMER}"),
}


@pytest.mark.parametrize("runbook", sorted(WORLD_FAULTS))
def test_a_fault_made_by_ordinary_means_names_the_same_runbook(fleet, runbook):
    """The doctor finds what it finds however the fault came, and the runbook's own steps repair it."""
    command, undo = WORLD_FAULTS[runbook]
    host = "gpu-02"
    on_host(host, f"systemctl start {WATCHDOG_SERVICE}")  # one health check of the serving engine, as its timer's
    try:
        on_host(host, command)
        status, hosts = doctor(fleet)
        named = {name: [finding["runbook"] for finding in found["findings"]] for name, found in hosts.items()}
        assert named == {name: [runbook] if name == host else [] for name in HOSTS}, named
        finding = hosts[host]["findings"][0]
        assert status == {"warning": 1, "critical": 2}[finding["severity"]]
        variables = {**finding["variables"], "HOST": host, "INVENTORY": fleet}
        run_steps(host, "Remedy", runbook, variables)
        run_steps(host, "Verify", runbook, variables)
    finally:
        if undo:
            on_host(host, undo)
    assert_clean(fleet)
