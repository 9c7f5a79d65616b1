"""Maintenance markers have an owner and a deadline: believed while the deadline holds, reported past it, and a
failed rollout's never believed (k3ops.maintenance); a rollout writes each marker with its id, its controller
and a deadline that covers its step."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from k3ops.maintenance import CHANGED_STATUS, FAILED, LIVE, STALE, UNDATED_MARKER_HOURS, compare_and_set, iso, standing
from k3ops.onhost.layout import MAINTENANCE_LOCK, MAINTENANCE_MARKER
from k3ops.upgrade.record import Rollout
from k3ops.facts.maintenance import MaintenanceMarker
from k3ops.facts.reader import read_fact
from k3ops.upgrade.steps import MARKER_GRACE_SECONDS, Run, StepFailed, unmark, write_marker

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
OURS = {"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "rollout": "5f0c2a91d3e4b6a7"}


@pytest.mark.parametrize(("marker", "verdict"), [
    ({**OURS, "state": "draining", "deadline": "2026-12-07T12:30:00+00:00"}, LIVE),
    ({**OURS, "state": "draining", "deadline": "2026-12-07T11:59:59+00:00"}, STALE),
    ({**OURS, "state": "draining", "deadline": "2026-12-07T12:30:00"}, LIVE),  # no zone: UTC
    ({**OURS, "state": "failed", "deadline": "2026-12-07T12:30:00+00:00"}, FAILED),  # failed outranks a deadline
    ({**OURS, "state": "failed", "deadline": None}, FAILED),
    ({"reason": "RMA 4711", "by": "ops: alice", "since": iso(NOW - timedelta(hours=UNDATED_MARKER_HOURS - 1))}, LIVE),
    ({"reason": "RMA 4711", "by": "ops: alice", "since": iso(NOW - timedelta(hours=UNDATED_MARKER_HOURS + 1))}, STALE),
    ({"reason": "RMA 4711", "by": "ops: alice", "since": "last week"}, STALE),  # no time to believe it until
    ({"reason": "unreadable marker: ''"}, STALE),  # an empty file
    ({**OURS, "state": "draining", "deadline": "soon"}, STALE),
])
def test_a_marker_is_believed_only_until_its_deadline(marker, verdict):
    assert standing(marker, NOW)[0] == verdict


class Remote:
    """A host whose marker is `marker_file`: the commands a step sends run in a real shell, the marker's path moved
    there."""

    name = "gpu-01"

    def __init__(self, marker_file):
        self.marker_file = marker_file

    def run(self, command: str) -> tuple[bool, str, str]:
        done = subprocess.run(["sh", "-c", command.replace(MAINTENANCE_MARKER, str(self.marker_file))
                               .replace(MAINTENANCE_LOCK, f"{self.marker_file}.lock")],
                              capture_output=True, text=True)
        return done.returncode == 0, done.stdout, done.stderr

    def check_output(self, command: str) -> str:
        ok, out, err = self.run(command)
        assert ok, err
        return out

    def get_fact(self, fact, **arguments):
        return read_fact(self.run, fact, **arguments)


def rollout(tmp_path) -> tuple[Run, dict]:
    """A rollout of one h200x8 host whose drain may last 600 s, and its group."""
    fleet = tmp_path / "fleet.py"
    data = {"hardware_profile": "h200x8", "nvidia_driver_version": "580.105.08", "upgrade_drain_timeout_seconds": 600,
            "upgrade_lb_settle_seconds": 5}
    fleet.write_text(f"hgx = [('gpu-01', {{'ssh_hostname': '192.0.2.10', **{data!r}}})]\n")
    group = {"name": "gpu-01", "hosts": ["gpu-01"], "to": "580.126.09", "marked": "2026-12-07T11:00:00+00:00"}
    run = Run(Rollout(tmp_path / "rollout.json", {"id": "5f0c2a91d3e4b6a7", "release": "driver", "inventory": str(fleet),
                                                  "groups": [group]}), tmp_path / "rollout.log")
    return run, group


def test_a_rollout_marks_a_host_with_its_id_its_controller_and_a_deadline_past_its_step(tmp_path):
    """Written by the command a step sends (run in a real shell, the marker's path moved under tmp_path): the
    drain's marker holds through the drain's limit and no further than its grace after it."""
    run, group = rollout(tmp_path)
    marker_file = tmp_path / "maintenance.json"
    remote = Remote(marker_file)
    written_at = datetime.now(timezone.utc)
    write_marker(run, remote, group, "draining")
    marker = json.loads(marker_file.read_text())
    assert {key: marker[key] for key in ("by", "state", "since", "rollout", "group")} == {
        "by": "k3ops upgrade", "state": "draining", "since": "2026-12-07T11:00:00+00:00",
        "rollout": "5f0c2a91d3e4b6a7", "group": "gpu-01"}
    assert marker["controller"] == run.controller and "@" in run.controller
    assert standing(marker, written_at + timedelta(seconds=605))[0] == LIVE
    assert standing(marker, written_at + timedelta(seconds=605 + MARKER_GRACE_SECONDS + 2))[0] == STALE
    write_marker(run, remote, group, FAILED, "fabric check failed: mlx5_2 port 1: Down")
    marker = json.loads(marker_file.read_text())
    assert marker["deadline"] is None and standing(marker)[0] == FAILED
    assert "fabric check failed: mlx5_2 port 1: Down" in standing(marker)[1]


def test_a_marker_someone_placed_during_the_rollout_is_never_overwritten_nor_removed(tmp_path):
    run, group = rollout(tmp_path)
    remote = Remote(tmp_path / "maintenance.json")
    write_marker(run, remote, group, "draining")
    hold = {"reason": "RMA ticket 4711", "by": "ops: alice", "since": "2026-12-07T11:30:00+00:00"}
    remote.marker_file.write_text(json.dumps(hold))
    with pytest.raises(StepFailed, match="taken out of service by ops: alice during the rollout .RMA ticket 4711."):
        write_marker(run, remote, group, "stopped")
    unmark(run, remote)
    assert json.loads(remote.marker_file.read_text()) == hold
    remote.marker_file.write_text(json.dumps({**OURS, "state": "soaking"}))  # this rollout's own: removed
    unmark(run, remote)
    assert not remote.marker_file.exists()


def test_of_two_controllers_that_read_the_same_marker_only_one_takes_the_host(tmp_path):
    """Both read no marker and judge the host free: the first write wins; the second is refused (the step that
    sent it fails) instead of overwriting the winner's marker."""
    ours, _ = rollout(tmp_path)
    theirs = Run(Rollout(tmp_path / "theirs.json", {**ours.rollout.record, "id": "0badc0ffee000001"}),
                 tmp_path / "theirs.log")
    group = {"name": "gpu-01", "hosts": ["gpu-01"], "to": "580.126.09"}
    remote = Remote(tmp_path / "maintenance.json")
    read = remote.get_fact(MaintenanceMarker)
    remote.get_fact = lambda fact, **arguments: read  # both controllers read before either writes
    write_marker(ours, remote, group, "draining")
    with pytest.raises(AssertionError, match="the maintenance marker changed since it was read"):
        write_marker(theirs, remote, group, "draining")
    assert json.loads(remote.marker_file.read_text())["rollout"] == ours.rollout.id


def test_a_marker_is_compared_and_set_atomically_under_the_lock(tmp_path):
    """Sixteen controllers at once, each having read no marker: exactly one writes it."""
    marker_file, lock = tmp_path / "maintenance.json", tmp_path / "maintenance.lock"
    commands = [compare_and_set(None, f"sleep 0.01; printf {index} > {marker_file}", str(marker_file), str(lock))
                for index in range(16)]
    racing = [subprocess.Popen(["sh", "-c", command], stderr=subprocess.DEVNULL) for command in commands]
    statuses = [process.wait() for process in racing]
    assert sorted(statuses) == [0] + [CHANGED_STATUS] * 15
    assert marker_file.read_text() == str(statuses.index(0))


def test_a_rollout_changes_only_the_marker_of_the_rollout_it_read(tmp_path):
    marker_file, lock = tmp_path / "maintenance.json", tmp_path / "maintenance.lock"
    marker_file.write_text(json.dumps({**OURS, "rollout": "0badc0ffee000001"}))  # another rollout's, meanwhile
    done = subprocess.run(["sh", "-c", compare_and_set(OURS, f"rm -f {marker_file}", str(marker_file), str(lock))],
                          capture_output=True, text=True)
    assert done.returncode == CHANGED_STATUS and marker_file.exists()
    marker_file.write_text(json.dumps({**OURS, "state": "soaking"}))
    done = subprocess.run(["sh", "-c", compare_and_set(OURS, f"rm -f {marker_file}", str(marker_file), str(lock))])
    assert done.returncode == 0 and not marker_file.exists()
