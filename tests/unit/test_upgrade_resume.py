"""A resumed rollout never runs a second deploy beside the one a dead controller started: the deploy runs in a
session of its own, recorded with its group by pid and start time, and the next controller waits for it."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from k3ops.upgrade import steps
from k3ops.upgrade.machine import STEPS, State
from k3ops.upgrade.record import Rollout


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "POLL_SECONDS", 0.05)
    group = {"name": "gpu-01", "hosts": ["gpu-01"], "to": "580.126.09"}
    return steps.Run(Rollout(tmp_path / "rollout.json", {"id": "5f0c2a91d3e4b6a7", "groups": [group]}),
                     tmp_path / "rollout.log")


def test_a_deploy_a_dead_controller_left_running_is_waited_for(run):
    deploy = subprocess.Popen(["sleep", "1"], start_new_session=True)  # as pyinfra() starts it
    group = run.rollout.groups[0]
    group["deploy"] = {"pid": deploy.pid, "started": steps.process_start(deploy.pid)}
    started = time.monotonic()
    steps.awaited(run, group)
    assert deploy.poll() is not None and time.monotonic() - started >= 0.5  # waited until it ended
    assert "deploy" not in group and "deploy" not in json.loads(run.rollout.path.read_text())["groups"][0]
    deploy.wait()


def test_a_recorded_pid_now_taken_by_another_process_is_not_waited_for(run):
    other = subprocess.Popen(["sleep", "30"])
    try:
        group = run.rollout.groups[0]
        group["deploy"] = {"pid": other.pid, "started": "1"}  # the deploy recorded started at another time
        started = time.monotonic()
        steps.awaited(run, group)
        assert time.monotonic() - started < 5 and other.poll() is None and "deploy" not in group
    finally:
        other.kill()
        other.wait()


def test_a_process_start_time_is_read_for_a_live_process_only():
    assert steps.process_start(1) is not None
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert steps.process_start(ended.pid) is None


def test_an_abort_ends_a_steps_wait_and_leaves_its_group_where_it_was(run, monkeypatch):
    """A drain, a reboot or a soak may last hours: `k3ops upgrade abort` does not wait for its end."""
    from k3ops.upgrade.rollout import advance

    group = run.rollout.groups[0]
    group.update(state="soaking", failures=0)
    monkeypatch.setitem(STEPS, State.SOAKING, lambda run, group: run.pause(3600))  # a soak of an hour
    abort = subprocess.Popen(["sh", "-c", f"sleep 0.3; touch {run.rollout.abort_flag}"])  # `k3ops upgrade abort`
    started = time.monotonic()
    advance(run, group)
    abort.wait()
    assert time.monotonic() - started < 5
    assert group["state"] == "soaking" and group["failures"] == 0 and "failed_at" not in group


@pytest.mark.parametrize(("failed_at", "resumed_at"), [("soaking", "validating"), ("validating", "validating"),
                                                       ("draining", "draining"), ("upgrading", "upgrading")])
def test_a_failed_group_is_retried_where_its_engine_can_come_back(run, failed_at, resumed_at):
    """Taken out of service, its engine was stopped: a soak cannot find it serving, a validation starts it."""
    from k3ops.upgrade.rollout import retry

    group = run.rollout.groups[0]
    group.update(state="failed", failed_at=failed_at, failures=1)
    retry(run.rollout, group)
    assert (group["state"], group["failures"]) == (resumed_at, 0)
