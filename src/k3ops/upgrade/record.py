"""The controller's record of a rollout: every group's state, written (atomically) at each step, so that a
rollout whose controller died resumes where it was, and one rollout per inventory runs at a time.

The record names the inventory file that `resume` executes, so it is the controller user's alone (a 0600 file
in a 0700 directory, never read through a link) and it pins that file's content by digest."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import re
import os
import secrets
import stat
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .machine import GROUP_KEYS, Group, State
from .releases import MODEL_REVISION, NVIDIA_DRIVER, RELEASES

RUNNING, HALTED, DONE, ABORTED = "running", "halted", "done", "aborted"
UNFINISHED = frozenset({RUNNING, HALTED})
# What the readers of a record use (new_rollout writes them all): a record without one is not read at all.
RECORD_KEYS = ("id", "inventory", "inventory_sha256", "release", "to", "canary", "max_unavailable", "budget",
               "max_failures", "limit", "skipped", "started", "status", "groups")
ROLLOUT_ID = re.compile(r"^[0-9a-f]{16}$")  # a rollout's id, as its markers name it (new_id)


def state_dir() -> Path:
    """Where rollouts are recorded on the controller ($XDG_STATE_HOME/k3ops/upgrades)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "k3ops" / "upgrades"


def record_path(inventory: str) -> Path:
    """One record per inventory file, named after its absolute path."""
    resolved = str(Path(inventory).resolve())
    return state_dir() / f"{Path(resolved).stem}-{hashlib.sha256(resolved.encode()).hexdigest()[:12]}.json"


def inventory_digest(inventory: str | Path) -> str:
    """The sha256 of the inventory file's content, as the record pins it."""
    try:
        return hashlib.sha256(Path(inventory).read_bytes()).hexdigest()
    except OSError as error:
        raise ValueError(f"cannot read the rollout's inventory {inventory}: {error.strerror}") from None


def private_dir(directory: Path) -> Path:
    """The records' directory, made 0700 (one made by an older k3ops is tightened); refused when it is a link or
    another user's."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = os.lstat(directory)
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise ValueError(f"{directory} is not a directory of this user's own: rollout records are kept private")
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(directory, 0o700)
    return directory


def new_id() -> str:
    """A new rollout's id: ROLLOUT_ID's form."""
    return secrets.token_hex(8)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Rollout:
    """A rollout as recorded: its arguments, its groups (machine.Group) and status."""

    def __init__(self, path: Path, record: dict):
        self.path, self.record = path, record

    @classmethod
    def load(cls, path: Path) -> Rollout:
        """The record at `path`, refused unless it is a regular file of this user's, open to no one else, and a
        whole record."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as error:
            why = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be read ({error.strerror})"
            raise ValueError(f"the rollout record {path} {why}; records are read only as this user's own files") \
                from None
        with open(fd, encoding="utf-8", errors="replace") as file:
            found = os.fstat(file.fileno())
            if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
                raise ValueError(f"the rollout record {path} is not a regular file of this user's; it is not read")
            if found.st_mode & 0o077:
                raise ValueError(f"the rollout record {path} is open to group or others (mode "
                                 f"{stat.S_IMODE(found.st_mode):04o}); it is not read: check it, then "
                                 f"`chmod 600 {path}`")
            text = file.read()
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"the rollout record {path} is not JSON ({error}); move it aside to start anew") from None
        if isinstance(record, dict):  # a record from before ROCm rollouts moved an NVIDIA driver
            record.setdefault("release", NVIDIA_DRIVER.kind)
        problem = incomplete(record)
        if problem:
            raise ValueError(f"the rollout record {path} is not a whole record ({problem}); move it aside to start "
                             "anew")
        return cls(path, record)

    @property
    def id(self) -> str:
        """The rollout's id, on every marker it writes: a marker with another id is not this rollout's."""
        return self.record["id"]

    @property
    def owns(self) -> set[str]:
        """The rollouts whose markers this one treats as its own: itself, and the dead ones it took over by name
        (`k3ops upgrade driver --take-over ID`)."""
        return {self.id, *self.record.get("taken_over", [])}

    @property
    def groups(self) -> list[Group]:
        return self.record["groups"]

    @property
    def status(self) -> str:
        return self.record["status"]

    def group(self, name: str) -> Group:
        return next(group for group in self.groups if group["name"] == name)

    def save(self) -> None:
        """Write the whole record to a new file (0600, a name no one else can have made) and rename it over the
        old: a reader never sees half of it."""
        partial = private_dir(self.path.parent) / f".{self.path.name}.{secrets.token_hex(8)}.partial"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with open(fd, "w", encoding="utf-8") as out:
                json.dump(self.record, out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, self.path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def check_inventory(self, inventory: str | None) -> None:
        """Refuse to execute any inventory but the one the rollout started with: the path given (when one is)
        must be the record's, and the file must hold what it held then."""
        recorded = self.record["inventory"]
        if inventory is not None and str(Path(inventory).resolve()) != recorded:
            raise ValueError(f"the rollout record {self.path} is of {recorded}, not {inventory}: it is not resumed")
        if inventory_digest(recorded) != self.record["inventory_sha256"]:
            raise ValueError(f"{recorded} has changed since the rollout started (its sha256 is not the record's): "
                             "a rollout resumes only with the inventory it planned; `k3ops upgrade abort` it and "
                             "start a new one")

    def move(self, group: Group, state: State, detail: str = "") -> None:
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
    private_dir(path.parent)
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another k3ops upgrade is working on this rollout ({path}); wait for it, or "
                               "`k3ops upgrade abort` it") from None
        yield


def incomplete(record) -> str | None:
    """What a record read back lacks (None: nothing): a hand-edited or truncated one is refused, not half-read."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing:
        return "no " + ", ".join(missing)
    if not isinstance(record["groups"], list) or not all(isinstance(group, dict) for group in record["groups"]):
        return "groups is not a list of objects"
    missing = sorted({key for group in record["groups"] for key in GROUP_KEYS if key not in group})
    if missing:
        return "a group without " + ", ".join(missing)
    if record["release"] not in RELEASES:
        return f"release {record['release']!r} is none of {', '.join(RELEASES)}"
    if record["release"] == MODEL_REVISION.kind and not isinstance(record.get("model"), dict):
        return "a model rollout without the model it moves"
    unknown = sorted({str(group["state"]) for group in record["groups"]} - set(State))
    return "a group in no state of a rollout: " + ", ".join(unknown) if unknown else None


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
