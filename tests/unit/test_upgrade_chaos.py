"""The chaos matrix of the rolling upgrade: for every state a group passes through, the controller killed there
(its whole process group, and separately the controller alone, its deploy running on), then `k3ops upgrade
resume`. Each run must end done with no group ever failed, never more hosts out of service than the budget, every
host on the new driver and serving. The fleet is simulated (tests/unit/upgrade_fleet.py) on bare metal's times;
the rollout, its record and its steps are the real ones. tests/lab/test_upgrade.py kills a real controller in the
lab at three of these points."""

from __future__ import annotations

import pytest

from k3ops.upgrade.machine import State
from k3ops.upgrade.record import Rollout

from .upgrade_fleet import WAY, Fleet, Fleets, cuda_index, kill_points, reboot_points, rolled

_clean: dict[str, Fleet] = {}  # the uninterrupted run, once per session


@pytest.fixture
def fleets(tmp_path, monkeypatch) -> Fleets:
    with cuda_index(tmp_path) as repository:
        yield Fleets(tmp_path, repository, monkeypatch)


def assert_done(fleet: Fleet, status: int) -> None:
    rollout = Rollout.load(fleet.record_path)
    failures = [entry for group in rollout.groups for entry in group.get("history", []) if entry[1] == State.FAILED]
    assert status == 0 and rollout.status == "done" and not failures, (rollout.record.get("why"), failures)
    _, new, budget = fleet.upgrade
    assert fleet.worst <= budget
    assert {(host.loaded, host.installed) for host in fleet.hosts.values()} == {(new, new)}
    assert fleet.out_of_service() == [] and all(host.marker is None for host in fleet.hosts.values())


def clean_run(fleets: Fleets) -> Fleet:
    """The uninterrupted rollout (run once): the state it was in at each of its moves."""
    if not _clean:
        fleet = fleets.new()
        assert_done(fleet, rolled(fleet))
        _clean["fleet"] = fleet
    return _clean["fleet"]


def test_an_uninterrupted_rollout_passes_every_state_within_the_budget(fleets):
    states = clean_run(fleets).states
    entered = [state for index, state in enumerate(states) if index == 0 or states[index - 1] != state]
    assert entered[:len(WAY)] == list(WAY) and set(entered) == set(WAY)


@pytest.mark.parametrize("whole_group", [True, False], ids=["process-group", "controller-alone"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("state", WAY)
def test_a_controller_killed_in_any_state_is_resumed_to_done(fleets, state, where, whole_group):
    """`where`: its first, a middle or its last move in that state, over the whole rollout (the canary's first
    moves, a later group's last)."""
    kill_at = kill_points(clean_run(fleets), state)[where]
    fleet = fleets.new()
    assert_done(fleet, rolled(fleet, kill_at, whole_group))
    assert fleet.moves > kill_at  # it was killed there, and resumed


@pytest.mark.parametrize("whole_group", [True, False], ids=["process-group", "controller-alone"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_a_controller_killed_inside_a_hosts_reboot_is_resumed_to_done(fleets, where, whole_group):
    """Bare metal stays down for minutes: the next controller waits for it, its healthy canary never fails."""
    fleet = fleets.new()
    assert_done(fleet, rolled(fleet, reboot_points(clean_run(fleets))[where], whole_group))


@pytest.fixture
def amd_fleets(tmp_path, monkeypatch) -> Fleets:
    with cuda_index(tmp_path) as repository:
        yield Fleets(tmp_path, repository, monkeypatch, amd=True)


@pytest.mark.parametrize("state", [State.UPGRADING, State.VALIDATING])
def test_an_amd_fleet_moves_to_a_rocm_release_through_the_same_machine_and_resumes_alike(amd_fleets, state):
    """`k3ops upgrade rocm`: the same states, budget and resume; a host runs the release once the kernel loads
    its amdgpu. Killed inside the canary's reboot, and after the engine started in validation."""
    clean = amd_fleets.new()
    assert_done(clean, rolled(clean))
    assert [state for state in WAY if state in clean.states] == list(WAY)
    where = reboot_points(clean)["first"] if state == State.UPGRADING else kill_points(clean, state)["last"]
    fleet = amd_fleets.new()
    assert_done(fleet, rolled(fleet, where, whole_group=False))
    assert fleet.moves > where
