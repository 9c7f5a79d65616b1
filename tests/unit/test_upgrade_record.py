"""The upgrade record names the inventory file `resume` executes: it is the controller user's alone, written
without following a link, and `resume` runs only the inventory it was started with, by path and content."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from k3ops.upgrade.record import Rollout, record_path, state_dir

from ..conftest import cli
from .test_upgrade_rollout import inventory, recorded, repository  # noqa: F401  (repository: a fixture)

HOSTS = 'hgx = [("gpu-01", {"hardware_profile": "h200x8", "ssh_hostname": "203.0.113.1"})]\n'


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """An inventory (its hosts never reached), its rollouts recorded under tmp_path, by this process and the
    command lines it runs."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inventory = tmp_path / "fleet.py"
    inventory.write_text(HOSTS)
    return str(inventory)


def k3ops(*arguments: str) -> subprocess.CompletedProcess:
    return cli("upgrade", *arguments)


def refused(result, *said: str) -> None:
    """Refused in one line on stderr, non-zero, no traceback, nothing run."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert all(words in result.stderr for words in said), result.stderr


def halted(fleet: str) -> Rollout:
    return recorded(fleet, "halted", [{"name": "gpu-01", "hosts": ["gpu-01"], "state": "failed", "failures": 1}])


def test_a_started_rollout_records_its_inventory_by_path_and_digest(tmp_path, monkeypatch, capsys, repository):
    from k3ops.cli import main
    from k3ops.upgrade import rollout

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(rollout, "run_rollout", lambda started: 0)  # recorded, then nothing run
    fleet = inventory(tmp_path, repository, {"gpu-01": {}})
    assert main(["upgrade", "driver", fleet, "--to", "580.126.09"]) == 0
    record = json.loads(record_path(fleet).read_text())
    assert record["inventory"] == fleet
    assert record["inventory_sha256"] == hashlib.sha256(Path(fleet).read_bytes()).hexdigest()


def test_the_record_and_its_directory_are_private(fleet):
    rollout = halted(fleet)
    assert stat.S_IMODE(os.stat(state_dir()).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(rollout.path).st_mode) == 0o600
    rollout.save()  # again, over the first: a new file, renamed over it, nothing left beside it
    assert sorted(path.name for path in state_dir().iterdir()) == [rollout.path.name]
    assert json.loads(rollout.path.read_text())["inventory_sha256"] == rollout.record["inventory_sha256"]


def test_a_directory_left_open_by_an_older_k3ops_is_closed(fleet):
    state_dir().mkdir(parents=True, mode=0o755)
    os.chmod(state_dir(), 0o755)
    halted(fleet)
    assert stat.S_IMODE(os.stat(state_dir()).st_mode) == 0o700


def test_a_link_at_the_records_name_is_replaced_never_written_through(fleet, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    state_dir().mkdir(parents=True, mode=0o700)
    record_path(fleet).symlink_to(victim)
    rollout = halted(fleet)
    assert victim.read_text() == "untouched\n"
    assert not rollout.path.is_symlink() and stat.S_IMODE(os.stat(rollout.path).st_mode) == 0o600


def test_resume_refuses_an_inventory_changed_since_the_start(fleet):
    halted(fleet)
    with open(fleet, "a") as inventory:
        inventory.write('hgx.append(("gpu-02", {"hardware_profile": "h200x8", "ssh_hostname": "203.0.113.2"}))\n')
    for arguments in (("resume", fleet), ("resume",)):
        refused(k3ops(*arguments), f"{fleet} has changed since the rollout started", "`k3ops upgrade abort` it")


def test_resume_refuses_a_record_naming_another_inventory(fleet, tmp_path):
    other = tmp_path / "other.py"
    other.write_text(HOSTS)
    rollout = halted(fleet)
    rollout.record.update(inventory=str(other))  # its digest is other.py's too: only the path differs
    rollout.save()
    refused(k3ops("resume", fleet), f"is of {other}, not {fleet}: it is not resumed")


def test_resume_refuses_a_record_whose_inventory_is_gone(fleet):
    halted(fleet)
    os.unlink(fleet)
    refused(k3ops("resume"), f"cannot read the rollout's inventory {fleet}: No such file or directory")


@pytest.mark.parametrize("spoil, said", [
    (lambda path: path.chmod(0o644), "is open to group or others (mode 0644); it is not read: check it, then "
                                     "`chmod 600"),
    (lambda path: path.chmod(0o620), "is open to group or others (mode 0620)"),
    (lambda path: (path.rename(path.with_suffix(".real")), path.symlink_to(path.with_suffix(".real"))),
     "is a symbolic link; records are read only as this user's own files"),
    (lambda path: path.write_text('{"inventory": "/tmp/fleet.py", "to": "580'), "is not JSON"),
    (lambda path: path.write_text("[]"), "is not a whole record (not a JSON object)"),
    (lambda path: path.write_text(json.dumps({key: value for key, value in json.loads(path.read_text()).items()
                                              if key != "inventory_sha256"})),
     "is not a whole record (no inventory_sha256); move it aside to start anew"),
    (lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "groups": [{"name": "gpu-01"}]})),
     "is not a whole record (a group without canary, failures, hosts, state, to)"),
    (lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "groups": [
        {**group, "state": "paused"} for group in json.loads(path.read_text())["groups"]]})),
     "is not a whole record (a group in no state of a rollout: paused)"),
    (lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "release": "firmware"})),
     "is not a whole record (release 'firmware' is none of driver, rocm, model)"),
], ids=["0644", "0620", "a link", "bad JSON", "not an object", "no digest", "a group cut short", "an unknown state",
        "an unknown release"])
@pytest.mark.parametrize("command", ["resume", "status", "abort"])
def test_a_record_that_is_not_private_or_not_whole_is_refused_in_one_line(fleet, spoil, said, command):
    path = halted(fleet).path
    spoil(path)
    refused(k3ops(command, fleet), f"the rollout record {path} {said}")


def test_a_record_written_before_rocm_rollouts_reads_as_an_nvidia_drivers(fleet):
    path = halted(fleet).path
    path.write_text(json.dumps({key: value for key, value in json.loads(path.read_text()).items() if key != "release"}))
    assert Rollout.load(path).record["release"] == "driver"


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_a_record_of_another_user_is_refused(fleet):
    path = halted(fleet).path
    os.chown(path, 65534, 65534)
    refused(k3ops("resume", fleet), f"the rollout record {path} is not a regular file of this user's")
