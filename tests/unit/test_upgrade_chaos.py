"""The chaos matrix of the rolling upgrade: for every state a group passes through, the controller killed there
(its whole process group, and separately the controller alone, its deploy running on), then `k3ops upgrade
resume`. Each run must end done with no group ever failed, never more hosts out of service than the budget, every
host on the new driver and serving. The fleet is simulated (tests/unit/upgrade_fleet.py) on bare metal's times;
the rollout, its record and its steps are the real ones. tests/lab/test_upgrade.py kills a real controller in the
lab at three of these points. A model revision (`k3ops upgrade model`) goes through the same machine: staged on
every host first, no reboot, a failed canary back on the revision it served."""

from __future__ import annotations

import pytest

from k3ops.upgrade.machine import State
from k3ops.upgrade.record import Rollout

from .upgrade_fleet import (MODEL, MODEL_BUDGET, MODEL_HOSTS, REVISION, STAGE_MODEL, SWITCH_MODEL, WAY, Fleet, Fleets,
                            cuda_index, kill_points, reboot_points, rolled)

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


@pytest.fixture
def model_fleets(tmp_path, monkeypatch) -> Fleets:
    with cuda_index(tmp_path) as repository:
        yield Fleets(tmp_path, repository, monkeypatch, model=True)


def test_a_model_revision_is_staged_on_every_host_before_any_group_is_drained(model_fleets):
    """`k3ops upgrade model`: the one staging deploy covers the four hosts while all serve; then each host in turn
    is drained, switched (no reboot: the fleet's boots never change) and validated on the revision its engine
    loaded, never more than one out."""
    fleet = model_fleets.new()
    assert_done(fleet, rolled(fleet))
    staging, *switches = sorted(fleet.deploys.values(), key=lambda deploy: deploy.begun)
    assert staging.function == STAGE_MODEL and sorted(staging.hosts) == sorted(MODEL_HOSTS)
    assert [deploy.function for deploy in switches] == [SWITCH_MODEL] * len(MODEL_HOSTS)
    assert staging.ends <= switches[0].begun
    assert {host.boot for host in fleet.hosts.values()} == {1}


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("state", ["pending", State.DRAINING, State.UPGRADING, State.VALIDATING, State.SOAKING])
def test_a_model_rollout_killed_in_any_state_is_resumed_to_done(model_fleets, state, where):
    """The controller alone killed (its staging or switch deploy running on) in the staging ("pending") and in each
    state a group passes through, then `k3ops upgrade resume`: done, within the budget, every engine on the new
    revision."""
    clean = model_fleets.new()
    assert_done(clean, rolled(clean))
    kill_at = kill_points(clean, state)[where]
    fleet = model_fleets.new()
    assert_done(fleet, rolled(fleet, kill_at, whole_group=False))
    assert fleet.moves > kill_at


def test_a_canary_that_cannot_load_the_new_revision_serves_the_old_one_again_and_halts_the_rollout(model_fleets):
    """No data asks for it: a model's failed canary goes back to the revision it served (still in its cache, so
    the switch back stages nothing), validates there and serves; the rollout halts, the other hosts untouched."""
    fleet = model_fleets.new()
    fleet.hosts["gpu-01"].cannot_load = REVISION
    assert rolled(fleet) == 1
    rollout = Rollout.load(fleet.record_path)
    canary = rollout.group("gpu-01")
    assert rollout.status == "halted" and canary["state"] == "done" and canary["failures"] == 1
    assert [deploy.version for deploy in fleet.deploys.values() if deploy.function == SWITCH_MODEL] == \
        [REVISION, MODEL["revision"]]
    assert {(name, host.installed, host.loaded) for name, host in fleet.hosts.items()} == \
        {(name, MODEL["revision"], MODEL["revision"]) for name in MODEL_HOSTS}
    assert fleet.out_of_service() == [] and fleet.worst <= MODEL_BUDGET
    assert all(host.marker is None for host in fleet.hosts.values())
