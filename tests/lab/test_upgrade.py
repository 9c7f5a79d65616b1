"""A rolling driver upgrade of a serving lab fleet (`k3ops upgrade`): three h200x8 hosts, each serving the tiny
model with llama-server at driver 580.105.08 behind the lab's load balancer (tests/lab/load_balancer.py), moved
to 580.126.09 one host at a time while a poller sends chat completions to every host the balancer lists.

In order: the plan and bad arguments touch no host; a canary that fails validation is rolled back, halts the
rollout, and the other hosts are untouched; after the fix, `resume` retries it, the controller is killed in the
middle of the next host, a second `resume` finishes, and no moment had more than one host out of service; a
plain deploy of the old version is then refused; a host a person took out is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3ops.onhost.layout import MAINTENANCE_MARKER
from k3ops_lab import lab as lab_module
from k3ops_lab import state

from ..conftest import REPO_ROOT
from .balanced_fleet import Poller, answers, balancer_data, chat_urls, serve_behind_the_balancer
from .conftest import COMMAND_TIMEOUT, k3ops, lab_inventory, on_host, pyinfra

LAB_PROFILES = ("h200x8", "h200x8", "h200x8")
HOSTS = ("gpu-01", "gpu-02", "gpu-03")
OLD, NEW = "580.105.08", "580.126.09"


def upgrade_inventory(work: Path) -> tuple[str, Path]:
    """The lab at the old driver behind the lab's balancer (a directory under `work`), with short waits."""
    balancer = work / "balancer"
    inventory = lab_inventory(work / "fleet.py", nvidia_driver_version=OLD, **balancer_data(balancer),
                              upgrade_rollback_failed_canary=True, reboot_timeout_seconds=300)
    return inventory, balancer


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    """The fleet at the old driver, serving, every host behind the balancer; rollouts recorded in a temporary
    state directory."""
    work = tmp_path_factory.mktemp("upgrade")
    inventory, balancer = upgrade_inventory(work)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(work / "state"))
        serve_behind_the_balancer(inventory, balancer, HOSTS)
        yield {"inventory": inventory, "balancer": balancer, "state": work / "state"}


def record(fleet) -> dict:
    return json.loads(k3ops("upgrade", "status", fleet["inventory"], "--json").stdout)


def group_states(fleet) -> dict[str, str]:
    return {group["name"]: group["state"] for group in record(fleet)["groups"]}


def driver(host: str) -> str:
    return on_host(host, "cat /sys/module/nvidia/version").stdout.strip()


def test_the_plan_and_bad_arguments_touch_no_host(fleet):
    shown = k3ops("upgrade", "driver", fleet["inventory"], "--to", NEW, "--dry-run").stdout
    assert "1. canary, then a soak: gpu-01 (gpu-01)" in shown and "2. batch: gpu-02 (gpu-02)" in shown
    assert "3. batch: gpu-03 (gpu-03)" in shown, shown
    two = k3ops("upgrade", "driver", fleet["inventory"], "--to", NEW, "--dry-run", "--max-unavailable", "2").stdout
    assert "2. batch: gpu-02 (gpu-02); gpu-03 (gpu-03)" in two, two
    unknown = k3ops("upgrade", "driver", fleet["inventory"], "--to", "580.999.99", check=False)
    assert unknown.returncode == 1 and "has no nvidia-driver 580.999.99-1" in unknown.stderr
    assert f"{OLD}-1, {NEW}-1" in unknown.stderr, unknown.stderr  # what the repository has instead
    none = k3ops("upgrade", "driver", fleet["inventory"], "--to", NEW, "--max-unavailable", "0", check=False)
    assert none.returncode == 1 and "--max-unavailable: 0" in none.stderr
    assert not fleet["state"].exists() or not list(fleet["state"].rglob("*.json"))  # no rollout recorded
    for host in HOSTS:
        assert on_host(host, f"test -e {MAINTENANCE_MARKER}", check=False).returncode == 1
        assert driver(host) == OLD


def test_a_canary_failing_validation_halts_the_rollout_and_leaves_the_rest_serving(fleet):
    """The canary fails its fabric check on the new driver, is rolled back (upgrade_rollback_failed_canary) and,
    the cable being still out, fails again on the old one: it stays out of service, and nothing else moved."""
    k3ops("lab", "fault", "gpu-01", "ib-port-down")  # a cable pulled: the fabric check after the upgrade fails
    started = k3ops("upgrade", "driver", fleet["inventory"], "--to", NEW, check=False)
    assert started.returncode == 1, started.stdout + started.stderr
    found = record(fleet)
    assert found["status"] == "halted" and "canary group failed: gpu-01" in found["why"], found
    assert group_states(fleet) == {"gpu-01": "failed", "gpu-02": "pending", "gpu-03": "pending"}
    failed = found["groups"][0]
    assert failed["failed_at"] == "validating" and "mlx5_2 port 1: Down" in failed["detail"], failed["detail"]
    assert (failed["rolled_back_from"], failed["to"]) == (NEW, OLD)
    assert [state for _, state, _ in failed["history"]].count("validating") == 2  # on the new driver, then the old
    assert driver("gpu-01") == OLD  # back, on a new boot (its boot id before the rollback's deploy is recorded)
    assert failed["before"]["gpu-01"][0] != on_host("gpu-01", "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    marker = json.loads(on_host("gpu-01", f"cat {MAINTENANCE_MARKER}").stdout)
    assert (marker["state"], marker["rollout"], marker["deadline"]) == ("failed", found["id"], None), marker
    assert "gpu-01" not in {path.name for path in fleet["balancer"].iterdir()}
    urls = chat_urls(fleet["inventory"])
    assert not answers(urls["gpu-01"])  # out of service: its engine is stopped too
    for host in ("gpu-02", "gpu-03"):
        assert driver(host) == OLD and answers(urls[host])
        assert on_host(host, f"test -e {MAINTENANCE_MARKER}", check=False).returncode == 1
    # Left out of service, it is the doctor's critical finding, not a silent MAINTENANCE.
    doctor = json.loads(k3ops("doctor", fleet["inventory"], "--json", check=False).stdout)
    parked = {host["host"]: host for host in doctor["hosts"]}["gpu-01"]
    assert doctor["exit_status"] == 2 and parked["status"] == "critical", parked
    assert parked["findings"][0]["runbook"] == "host-left-in-maintenance" and \
        "mlx5_2 port 1: Down" in parked["findings"][0]["summary"], parked


def killed_controller(fleet: dict, when, what: str) -> str:
    """`k3ops upgrade resume` started, then killed with everything in its process group once `when()` holds
    (the deploy it started runs in a session of its own, and outlives it as it would a real controller's death)."""
    controller = subprocess.Popen([sys.executable, "-m", "k3ops.cli", "upgrade", "resume", fleet["inventory"]],
                                  cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while not when():
        assert controller.poll() is None and time.monotonic() < deadline, f"before {what}: {controller.stdout.read()}"
        time.sleep(0.5)
    os.killpg(controller.pid, signal.SIGKILL)
    controller.wait()
    assert record(fleet)["status"] == "running"  # as the dead controller left it
    return controller.stdout.read()


def test_resume_after_the_controller_dies_finishes_with_one_host_out_at_a_time(fleet):
    """The controller dies in gpu-01's drain (the failed canary, retried), inside gpu-02's reboot (off for 30 s,
    as bare metal is for minutes), and once gpu-03's engine has started in its validation; each resume finishes
    what the dead one left, the last to the end, and never takes a second host out."""
    k3ops("lab", "fault", "gpu-01", "--clear")
    k3ops("lab", "boot-delay", "gpu-02", "30")
    console = lab_module.console_log(state.load().host("gpu-02"))
    reboots = console.read_text(errors="replace").count("rebooted;")
    poller = Poller(fleet["inventory"], fleet["balancer"], HOSTS)
    poller.start()
    try:
        killed_controller(fleet, lambda: group_states(fleet)["gpu-01"] == "draining", "gpu-01's drain")
        killed_controller(fleet, lambda: console.read_text(errors="replace").count("rebooted;") > reboots,
                          "gpu-02's reboot")
        second = killed_controller(fleet, lambda: group_states(fleet)["gpu-03"] == "validating" and on_host(
            "gpu-03", "systemctl is-active k3ops-engine.service", check=False).stdout.strip() == "active",
            "gpu-03's engine started in its validation")
        # The first controller's deploy, still waiting out gpu-02's reboot, was waited for, not run beside.
        assert "gpu-02: waiting for the deploy a controller before this one started" in second, second
        resumed = k3ops("upgrade", "resume", check=False)  # the only unfinished rollout on this controller
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        k3ops("lab", "boot-delay", "gpu-02", "2")
        poller.stopping.set()
        poller.join()
    assert poller.polls > 20 and not poller.dropped, (poller.polls, poller.dropped)
    assert poller.most_out == 1
    found = record(fleet)
    assert found["status"] == "done" and set(group_states(fleet).values()) == {"done"}
    for group in found["groups"][1:]:  # each state entered once, its step run again by the next controller
        entered = [state for _, state, _ in group["history"]]
        assert entered.count("upgrading") == entered.count("validating") == 1, group["history"]
    retried = [state for _, state, _ in found["groups"][0]["history"]]
    retried = retried[len(retried) - retried[::-1].index("failed"):]  # since the canary's last failure
    assert retried.count("draining") == 1 and retried[-1] == "done", found["groups"][0]["history"]
    urls = chat_urls(fleet["inventory"])
    for host in HOSTS:
        assert driver(host) == NEW and answers(urls[host])
        held = on_host(host, "apt-mark showhold").stdout.split()
        assert {"nvidia-driver", "nvidia-fabricmanager"} <= set(held)
        assert on_host(host, "dpkg-query -W -f '${Version}' nvidia-driver").stdout == f"{NEW}-1"
        assert on_host(host, f"test -e {MAINTENANCE_MARKER}", check=False).returncode == 1
    assert {path.name for path in fleet["balancer"].iterdir()} == set(HOSTS)


def test_a_rollout_run_again_drains_nothing(fleet):
    again = k3ops("upgrade", "driver", fleet["inventory"], "--to", NEW)
    assert "rollout done: every group is done" in again.stdout, again.stdout
    assert all(group["detail"].startswith(f"already runs {NEW}") for group in record(fleet)["groups"])
    assert {path.name for path in fleet["balancer"].iterdir()} == set(HOSTS)
    for host in HOSTS:
        assert on_host(host, f"test -e {MAINTENANCE_MARKER}", check=False).returncode == 1


def test_a_plain_deploy_of_the_old_version_is_refused_on_serving_hosts(fleet):
    """After the rollout the inventory still says the old driver: a deploy would reboot every host at once."""
    refused = pyinfra("deploys/gpu_host.py", inventory=fleet["inventory"])
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and f"runs NVIDIA driver {NEW} and serves" in output, output[-3000:]
    assert f"k3ops upgrade driver INVENTORY --to {OLD}" in output
    for host in HOSTS:
        assert driver(host) == NEW


def test_a_host_taken_out_by_hand_is_never_touched_nor_readmitted(fleet):
    """Someone drained gpu-03 (their marker, out of the balancer), and someone took gpu-01 out of the balancer
    with no marker: a rollback of the three moves gpu-02, counts the other two against the budget, and leaves
    them exactly as they were left."""
    hand = json.dumps({"reason": "RMA ticket 4711", "since": "2026-12-01T12:00:00+00:00", "by": "ops: alice"})
    on_host("gpu-03", f"printf '%s\\n' '{hand}' > {MAINTENANCE_MARKER}")
    for host in ("gpu-01", "gpu-03"):
        (fleet["balancer"] / host).unlink()
    moved = k3ops("upgrade", "driver", fleet["inventory"], "--to", OLD, "--max-unavailable", "3", check=False)
    assert moved.returncode == 1, moved.stdout + moved.stderr
    found = record(fleet)
    assert found["status"] == "halted" and "gpu-01, gpu-03 held by hand" in found["why"], found
    assert group_states(fleet) == {"gpu-01": "held", "gpu-02": "done", "gpu-03": "held"}
    assert found["groups"][0]["detail"].endswith("not behind the load balancer (python3 exited 1), with no "
                                                 "maintenance marker"), found["groups"][0]
    assert "RMA ticket 4711 (by ops: alice)" in found["groups"][2]["detail"]
    assert driver("gpu-02") == OLD and driver("gpu-01") == driver("gpu-03") == NEW
    assert json.loads(on_host("gpu-03", f"cat {MAINTENANCE_MARKER}").stdout)["by"] == "ops: alice"
    assert on_host("gpu-01", f"test -e {MAINTENANCE_MARKER}", check=False).returncode == 1
    assert {path.name for path in fleet["balancer"].iterdir()} == {"gpu-02"}
    assert all(on_host(host, "systemctl is-active k3ops-engine.service").stdout.strip() == "active"
               for host in ("gpu-01", "gpu-03"))
