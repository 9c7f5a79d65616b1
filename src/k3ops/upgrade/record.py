"""The controller's record of a rollout: every group's state, written (atomically) at each step, so that a
rollout whose controller died resumes where it was, and one rollout per inventory runs at a time."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

# A group's way through a rollout, in order; `failed` and `held` end it early.
STATES = ("pending", "draining", "stopped", "upgrading", "rebooting", "validating", "soaking", "done")
FAILED, HELD = "failed", "held"
# Out of service: deregistered, stopped or not yet back. A soaking group serves again, but keeps its slot
# until it is done, so that one failing its soak never takes the fleet past the budget.
OUT_OF_SERVICE = frozenset({"draining", "stopped", "upgrading", "rebooting", "validating", FAILED})
IN_FLIGHT = frozenset(STATES[1:-1])
RUNNING, HALTED, DONE, ABORTED = "running", "halted", "done", "aborted"
UNFINISHED = frozenset({RUNNING, HALTED})
MARKER_BY = "k3ops upgrade"  # the maintenance marker's `by`: a marker by anyone else is a person's drain


def state_dir() -> Path:
    """Where rollouts are recorded on the controller ($XDG_STATE_HOME/k3ops/upgrades)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "k3ops" / "upgrades"


def record_path(inventory: str) -> Path:
    """One record per inventory file, named after its absolute path."""
    resolved = str(Path(inventory).resolve())
    return state_dir() / f"{Path(resolved).stem}-{hashlib.sha256(resolved.encode()).hexdigest()[:12]}.json"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Rollout:
    """A rollout as recorded: its arguments, its groups ({name, hosts, canary, state, to, ...}) and status."""

    def __init__(self, path: Path, record: dict):
        self.path, self.record = path, record

    @classmethod
    def load(cls, path: Path) -> Rollout:
        return cls(path, json.loads(path.read_text()))

    @property
    def groups(self) -> list[dict]:
        return self.record["groups"]

    @property
    def status(self) -> str:
        return self.record["status"]

    def group(self, name: str) -> dict:
        return next(group for group in self.groups if group["name"] == name)

    def save(self) -> None:
        """Write the whole record to a new file and rename it over the old: a reader never sees half of it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        with open(partial, "w") as out:
            json.dump(self.record, out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)

    def move(self, group: dict, state: str, detail: str = "") -> None:
        """A group enters a state: recorded with the time, and saved before anything else happens."""
        group.update(state=state, detail=detail, since=now(), since_epoch=time.time())
        group.setdefault("history", []).append([group["since"], state, detail])
        self.save()

    @property
    def abort_flag(self) -> Path:
        return self.path.with_suffix(".abort")


@contextmanager
def exclusive(path: Path):
    """Hold the rollout's lock for as long as this controller works on it; a dead controller's lock is gone
    with its process, so `resume` never waits on a stale one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another k3ops upgrade is working on this rollout ({path}); wait for it, or "
                               "`k3ops upgrade abort` it") from None
        yield


def unfinished(inventory: str | None) -> Rollout:
    """The rollout to resume or abort: the inventory's, or the only unfinished one on this controller."""
    if inventory is not None:
        path = record_path(inventory)
        if not path.exists():
            raise ValueError(f"no rollout is recorded for {inventory} (in {state_dir()})")
        return Rollout.load(path)
    found = [Rollout.load(path) for path in sorted(state_dir().glob("*.json"))] if state_dir().is_dir() else []
    found = [rollout for rollout in found if rollout.status in UNFINISHED]
    if len(found) != 1:
        names = ", ".join(rollout.record["inventory"] for rollout in found) or "none"
        raise ValueError(f"{len(found)} unfinished rollouts on this controller ({names}): name the inventory")
    return found[0]
