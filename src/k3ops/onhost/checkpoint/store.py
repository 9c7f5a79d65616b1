"""One model's directory on the cache volume, and the only code that changes which revision is active.

    <cache>/<name>/current -> revisions/<sha>      what the engines load (a relative link)
    <cache>/<name>/revisions/<sha>/                verified revisions, never written while active
    <cache>/<name>/staging/<sha>/                  a fetch in progress (resumed by the next run)
    <cache>/<name>/manifests/<sha>.json            written last: a peer copies only revisions with one
    <cache>/<name>/state.json                      progress and verification, read by `k3ops model status`

Staging, revisions and the link live on one filesystem, so installing and activating are renames.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from pathlib import Path

from ..layout import CURRENT_LINK, MANIFESTS_DIR, REVISIONS_DIR, STAGING_DIR, STORE_STATE_FILE
from .manifest import Manifest, write_atomically


class StoreBusy(RuntimeError):
    pass


class ModelStore:
    def __init__(self, cache: Path, name: str):
        self.root = Path(cache) / name
        self.revisions = self.root / REVISIONS_DIR
        self.staging = self.root / STAGING_DIR
        self.manifests = self.root / MANIFESTS_DIR
        self.current = self.root / CURRENT_LINK
        self.state_file = self.root / STORE_STATE_FILE
        self._state_lock = threading.Lock()

    def create(self) -> None:
        for directory in (self.revisions, self.staging, self.manifests):
            directory.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def locked(self):
        """One writer at a time (a fetch, a verification or a rollback)."""
        self.create()
        with open(self.root / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusy(f"{self.root} is busy: another fetch, verification or rollback holds its lock") from None
            yield

    def active(self) -> str | None:
        try:
            return Path(os.readlink(self.current)).name
        except FileNotFoundError:
            return None

    def manifest_path(self, revision: str) -> Path:
        return self.manifests / f"{revision}.json"

    def has(self, revision: str) -> bool:
        """The revision is installed: its files verified and its manifest written."""
        return (self.revisions / revision).is_dir() and self.manifest_path(revision).exists()

    def installed(self) -> list[str]:
        return sorted(path.name for path in self.revisions.iterdir()) if self.revisions.is_dir() else []

    def install(self, manifest: Manifest) -> None:
        """Move a verified staging directory into place, then publish its manifest."""
        os.replace(self.staging / manifest.revision, self.revisions / manifest.revision)
        manifest.save(self.manifest_path(manifest.revision))

    def activate(self, revision: str) -> None:
        """Point `current` at `revision` in one rename; remember what was active for rollback."""
        previous = self.active()
        temporary = self.root / f".current.{os.getpid()}.tmp"
        temporary.unlink(missing_ok=True)
        os.symlink(f"{REVISIONS_DIR}/{revision}", temporary)
        os.replace(temporary, self.current)
        if previous and previous != revision:
            history = [sha for sha in self.state().get("history", []) if sha not in (revision, previous)]
            self.update_state(history=[previous, *history])

    def prune(self, keep_previous: int) -> list[str]:
        """Remove revisions beyond the active one, `keep_previous` earlier ones and the one a rollout staged."""
        active, state = self.active(), self.state()
        earlier = [sha for sha in state.get("history", []) if self.has(sha)][:keep_previous]
        keep = {active, state.get("staged"), *earlier}
        removed = []
        for revision in self.installed():
            if revision not in keep:
                self.manifest_path(revision).unlink(missing_ok=True)
                shutil.rmtree(self.revisions / revision)
                removed.append(revision)
        self.update_state(history=[sha for sha in self.state().get("history", []) if sha in keep])
        return removed

    def drop_staging(self, except_revision: str | None = None) -> None:
        if self.staging.is_dir():
            for directory in self.staging.iterdir():
                if directory.name != except_revision:
                    shutil.rmtree(directory)

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}

    def update_state(self, **changes) -> dict:
        with self._state_lock:
            state = {**self.state(), **changes, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            write_atomically(self.state_file, json.dumps(state, indent=1, sort_keys=True) + "\n")
            return state


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def tree_bytes(path: Path) -> int:
    """Bytes in the files under a directory (a download's progress)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total
