"""The chaos matrix of the rolling upgrade: for every state a group passes through, the controller killed there
(its whole process group, and separately the controller alone, its deploy running on), then `k3ops upgrade
resume`. Each run must end done with no group ever failed, never more hosts out of service than the budget, every
host on the new driver and serving. The fleet is simulated (tests/unit/upgrade_fleet.py) on bare metal's times;
the rollout, its record and its steps are the real ones. tests/lab/test_upgrade.py kills a real controller in the
lab at three of these points."""

from __future__ import annotations

import pytest

from k3ops.upgrade.machine import IN_FLIGHT, State
from k3ops.upgrade.record import Rollout, record_path

from ..conftest import cli
from .test_upgrade_rollout import DIGEST, MODEL, repository  # noqa: F401  (a fixture)
from .upgrade_fleet import Fleet, Killed

OLD, NEW = "580.105.08", "580.126.09"
CLUSTERS = {"h200-a": ["gpu-01", "gpu-02"], "h200-b": ["gpu-03", "gpu-04"], "h200-c": ["gpu-05", "gpu-06"]}
BUDGET = 2  # --max-unavailable: one 2-node group at a time
WAY = ("pending", *sorted(IN_FLIGHT, key=list(State).index))
_clean: dict[str, Fleet] = {}  # the uninterrupted run, once per session


@pytest.fixture
def fleets(tmp_path, monkeypatch, repository):  # noqa: F811
    """New simulated fleets of CLUSTERS on OLD, each with a controller state of its own."""
    entries = [(name, {"ssh_hostname": f"192.0.2.{index}", "hardware_profile": "h200x8", "allow_plain_http": True,
                       "nvidia_driver_version": OLD, "upgrade_soak_seconds": 30,
                       "repositories": {"cuda": {"url": repository, "key_url": repository + "key.gpg"}},
                       "model": MODEL, "engine": {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST,
                                                  "cluster": cluster}})
               for index, (cluster, name) in enumerate(((cluster, name) for cluster, names in CLUSTERS.items()
                                                        for name in names), 10)]
    inventory = tmp_path / "fleet.py"
    inventory.write_text(f"hgx = {entries!r}\n")
    made = []

    def new() -> Fleet:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / f"state-{len(made)}"))
        fleet = Fleet.of(CLUSTERS, OLD)
        fleet.inventory, fleet.record_path = str(inventory), record_path(str(inventory))
        fleet.install(monkeypatch)
        made.append(fleet)
        return fleet
    return new


def rolled(fleet: Fleet, kill_at: int | None = None, whole_group: bool = True) -> int:
    """`k3ops upgrade driver` to NEW, killed at move `kill_at`; then, if it was, `k3ops upgrade resume`."""
    fleet.kill_at, fleet.whole_group = kill_at, whole_group
    try:
        return cli("upgrade", "driver", fleet.inventory, "--to", NEW, "--max-unavailable", str(BUDGET)).returncode
    except Killed:
        fleet.revive()
        return cli("upgrade", "resume", fleet.inventory).returncode


def assert_done(fleet: Fleet, status: int) -> None:
    rollout = Rollout.load(fleet.record_path)
    failures = [entry for group in rollout.groups for entry in group.get("history", []) if entry[1] == State.FAILED]
    assert status == 0 and rollout.status == "done" and not failures, (rollout.record.get("why"), failures)
    assert fleet.worst <= BUDGET
    assert {(host.loaded, host.installed) for host in fleet.hosts.values()} == {(NEW, NEW)}
    assert fleet.out_of_service() == [] and all(host.marker is None for host in fleet.hosts.values())


def clean_run(fleets) -> Fleet:
    """The uninterrupted rollout (run once): the state it was in at each of its moves."""
    if not _clean:
        fleet = fleets()
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
    """`where`: its first, middle or last move in that state, over the whole rollout (the canary's first moves,
    a later group's last)."""
    moves = [index + 1 for index, found in enumerate(clean_run(fleets).states) if found == state]
    kill_at = {"first": moves[0], "middle": moves[len(moves) // 2], "last": moves[-1]}[where]
    fleet = fleets()
    assert_done(fleet, rolled(fleet, kill_at, whole_group))
    assert fleet.moves > kill_at  # it was killed there, and resumed


@pytest.mark.parametrize("whole_group", [True, False], ids=["process-group", "controller-alone"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_a_controller_killed_inside_a_hosts_reboot_is_resumed_to_done(fleets, where, whole_group):
    """Bare metal stays down for minutes: the next controller waits for it, its healthy canary never fails."""
    moves = [index + 1 for index, down in enumerate(clean_run(fleets).rebooting) if down]
    fleet = fleets()
    assert_done(fleet, rolled(fleet, moves[0] if where == "first" else moves[-1], whole_group))
