"""Fetch a pinned revision into the store, verify every byte, then make it the active one (or, for a rollout's
staging, leave it installed beside the active one: `activate` false).

Run as a systemd oneshot per model. Safe to kill and rerun at any point: finished files in staging
are kept (and checked again), the active revision is never written to except to replace a file the
last verification found corrupt, and nothing changes `current` but a verified install or a rollback.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import verify
from .manifest import FileEntry, Manifest
from .sources import Peer, download_from_hub, hub_manifest
from .store import ModelStore, free_bytes, tree_bytes

PEER_POLL_SECONDS = 2
# A peer in the same deploy run starts its own fetch within seconds of this host.
PEER_START_GRACE_SECONDS = 60
PROGRESS_SECONDS = 2
GIB = 1024**3


class FetchError(RuntimeError):
    pass


@dataclass(frozen=True)
class FetchConfig:
    """What the deploy writes to the model's config file (`layout.model_config`)."""

    name: str
    repo_id: str
    revision: str
    cache_path: str
    endpoint: str
    headroom_bytes: int
    rollback_depth: int
    peers: list[str] = field(default_factory=list)  # in the order to ask them: parent first
    peer_wait_seconds: int = 0
    peer_key: str = ""
    peer_bwlimit_kib: int | None = None
    require_mount: bool = False  # the cache is a volume of its own: never fill the filesystem under it
    allow_patterns: list[str] | None = None
    ignore_patterns: list[str] | None = None
    activate: bool = True  # false: installed and verified beside the active revision, which keeps serving

    @classmethod
    def load(cls, path: str | Path) -> FetchConfig:
        return cls(**json.loads(Path(path).read_text()))

    def store(self) -> ModelStore:
        return ModelStore(Path(self.cache_path), self.name)


def log(message: str) -> None:
    print(message, flush=True)


def fetch(config: FetchConfig) -> None:
    if config.require_mount and not os.path.ismount(config.cache_path):
        raise FetchError(f"the model cache volume is not mounted at {config.cache_path} (its fstab entry has "
                         "nofail, so a failed disk leaves the bare directory): refusing to fill the filesystem under it")
    store = config.store()
    with store.locked():
        state = store.state()
        target = config.revision
        bad = state.get("bad_files", []) if state.get("active") == target else []
        if store.active() == target and store.has(target) and not bad:
            log(f"{config.name}: {target} is active and verified")
        elif store.has(target) and not bad:
            log(f"{config.name}: {target} is installed" + ("; activating it" if config.activate else ""))
        else:
            _fetch_files(config, store, bad)
        if not config.activate:
            store.drop_staging()
            if store.active() != target:
                store.update_state(staged=target, target=target, phase="active", message=f"staged {target}")
                log(f"{config.name}: {target} is staged, verified; {store.active()} stays active")
            return
        store.activate(target)
        store.drop_staging()
        removed = store.prune(config.rollback_depth)
        store.update_state(active=target, target=target, phase="active", message="", bad_files=[], staged=None)
        for revision in removed:
            log(f"{config.name}: pruned {revision} (rollback depth {config.rollback_depth})")


def _fetch_files(config: FetchConfig, store: ModelStore, bad: list[str]) -> None:
    target = config.revision
    if store.state().get("target") != target:  # byte counts are per revision, across resumed runs
        store.update_state(bytes_from_hub=0, bytes_from_peers=0, bytes_done=0, bytes_total=0)
    store.update_state(target=target, phase="metadata", message="reading file metadata from the Hub")
    started = time.monotonic()
    try:
        manifest = hub_manifest(config.repo_id, target, config.endpoint, config.allow_patterns, config.ignore_patterns)
        repairing = store.has(target) and bad
        wanted = [entry for entry in manifest.files if entry.path in bad] if repairing else list(manifest.files)
        staging = store.staging / target
        staging.mkdir(parents=True, exist_ok=True)
        todo = _missing(staging, wanted, store, target)
        _preflight(config, store, todo)
        _fill(config, store, manifest, staging, todo, total=sum(entry.size for entry in wanted))
        _remove_strays(staging, wanted)
        store.update_state(phase="verifying", message=f"verifying {len(wanted)} files")
        problems = verify.problems(staging, wanted)
        if problems:
            for path in problems:
                (staging / path).unlink(missing_ok=True)
            raise FetchError("verification failed (the bad files were removed; rerun to fetch them again): "
                             + "; ".join(f"{path}: {why}" for path, why in sorted(problems.items())))
        if repairing:
            for entry in wanted:
                os.replace(staging / entry.path, store.revisions / target / entry.path)
            log(f"{config.name}: repaired {len(wanted)} files of {target}")
        else:
            store.install(manifest)
            log(f"{config.name}: installed {target} ({manifest.total_bytes} bytes, {len(manifest.files)} files verified)")
        store.update_state(verified_at=_now(), verification="ok", fetch_seconds=round(time.monotonic() - started, 1))
    except Exception as error:
        store.update_state(phase="failed", message=str(error))
        raise


def _missing(staging: Path, wanted: list[FileEntry], store: ModelStore, target: str) -> list[FileEntry]:
    """Files still to fetch: those in staging from an earlier run and verified now are kept, and files
    identical to ones in another installed revision are hard-linked instead of downloaded."""
    present = [entry for entry in wanted if (staging / entry.path).exists()]
    broken = verify.problems(staging, present)
    for path in broken:
        (staging / path).unlink()
    kept = {entry.path for entry in present} - set(broken)
    if kept:
        log(f"resuming: {len(kept)} files already fetched and verified")
    local = _local_copies(store, target)
    todo = []
    for entry in wanted:
        if entry.path in kept:
            continue
        source = local.get((entry.sha256 or entry.blob_id, entry.size))
        if source is not None:
            (staging / entry.path).parent.mkdir(parents=True, exist_ok=True)
            os.link(source, staging / entry.path)
        else:
            todo.append(entry)
    return todo


def _remove_strays(staging: Path, wanted: list[FileEntry]) -> None:
    """Drop what an interrupted copy left behind (rsync's temporary files) and the manifest does not list."""
    expected = {entry.path for entry in wanted}
    for directory, _, files in os.walk(staging):
        for name in files:
            path = Path(directory, name)
            if str(path.relative_to(staging)) not in expected:
                path.unlink()


def _local_copies(store: ModelStore, target: str) -> dict[tuple[str, int], Path]:
    """Files of other installed revisions, by digest and size (they were verified when installed)."""
    copies = {}
    for revision in store.installed():
        if revision != target and store.has(revision):
            for entry in Manifest.load(store.manifest_path(revision)).files:
                copies[(entry.sha256 or entry.blob_id, entry.size)] = store.revisions / revision / entry.path
    return copies


def _preflight(config: FetchConfig, store: ModelStore, todo: list[FileEntry]) -> None:
    """Refuse to start a download the volume cannot hold (huggingface_hub itself only warns)."""
    needed = sum(entry.size for entry in todo)
    free = free_bytes(store.root)
    if free < needed + config.headroom_bytes:
        raise FetchError(
            f"not enough space on {config.cache_path} for {config.repo_id}@{config.revision}: "
            f"{needed / GIB:.2f} GiB to fetch + {config.headroom_bytes / GIB:.2f} GiB headroom, "
            f"{free / GIB:.2f} GiB free. Free space, lower rollback_depth, or grow the volume; nothing was fetched")


def _fill(config: FetchConfig, store: ModelStore, manifest: Manifest, staging: Path, todo: list[FileEntry],
          total: int) -> None:
    if not todo:
        return
    store.update_state(bytes_total=total)
    with _Progress(store, staging):
        for peer in _ready_peers(config, store):
            try:
                pulled = peer.pull(config.revision, todo, staging)
            except RuntimeError as error:
                log(f"{config.name}: {error}; trying the next source")
                continue
            store.update_state(bytes_from_peers=store.state().get("bytes_from_peers", 0) + pulled)
            log(f"{config.name}: copied {pulled} bytes from peer {peer}")
            return
        store.update_state(phase="downloading", source="hub", message=f"downloading {len(todo)} files from the Hub")
        fetched = download_from_hub(manifest, todo, staging, config.endpoint)
        store.update_state(bytes_from_hub=store.state().get("bytes_from_hub", 0) + fetched)
        log(f"{config.name}: downloaded {fetched} bytes from {config.endpoint}")


def _ready_peers(config: FetchConfig, store: ModelStore):
    """Peers in order, each once it has installed the revision. A peer that is fetching it is waited
    for; one that failed, or has not started on it within a grace period (not in this deploy run),
    or outlasts the wait, is skipped."""
    deadline = time.monotonic() + config.peer_wait_seconds
    for address in config.peers:
        peer = Peer(address, config.name, Path(config.peer_key), config.peer_bwlimit_kib)
        store.update_state(phase="waiting", source=f"peer {address}", message=f"waiting for peer {address}")
        grace = time.monotonic() + PEER_START_GRACE_SECONDS
        while not peer.has(config.revision):
            state = peer.state()
            working = state.get("target") == config.revision and state.get("phase") not in ("failed", "active")
            now = time.monotonic()
            if now > deadline or (not working and now > grace) or (
                    state.get("target") == config.revision and state.get("phase") == "failed"):
                log(f"{config.name}: peer {address} cannot supply {config.revision} ({state.get('phase', 'unreachable')})")
                break
            time.sleep(PEER_POLL_SECONDS)
        else:
            store.update_state(phase="downloading", message=f"copying from peer {address}")
            yield peer


class _Progress:
    """Record bytes done and the rate in state.json while files arrive, for `k3ops model status`."""

    def __init__(self, store: ModelStore, staging: Path):
        self.store = store
        self.staging = staging
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()
        self._record(None)

    def _run(self) -> None:
        last = (time.monotonic(), tree_bytes(self.staging))
        while not self.stop.wait(PROGRESS_SECONDS):
            last = self._record(last)

    def _record(self, last):
        now, done = time.monotonic(), tree_bytes(self.staging)
        rate = (done - last[1]) / (now - last[0]) if last and now > last[0] else 0.0
        self.store.update_state(bytes_done=done, rate_bytes_per_s=round(max(rate, 0.0)))
        return now, done


def verify_active(config: FetchConfig) -> list[str]:
    """Hash the active revision against its manifest; the bad files are repaired by the next fetch."""
    store = config.store()
    with store.locked():
        active = store.active()
        if active is None:
            raise FetchError(f"{config.name}: no active revision to verify")
        manifest = Manifest.load(store.manifest_path(active))
        store.update_state(phase="verifying", message=f"verifying {active}")
        problems = verify.problems(store.revisions / active, manifest.files)
        for path, why in sorted(problems.items()):
            log(f"{config.name}: {path}: {why}")
        store.update_state(phase="active", message="", verified_at=_now(), bad_files=sorted(problems),
                           verification="ok" if not problems else f"{len(problems)} bad files")
        return sorted(problems)


def rollback(config: FetchConfig) -> str:
    """Make the most recent earlier revision active again (one rename)."""
    store = config.store()
    with store.locked():
        earlier = [sha for sha in store.state().get("history", []) if store.has(sha)]
        if not earlier:
            raise FetchError(f"{config.name}: no earlier revision on disk to roll back to")
        store.activate(earlier[0])
        store.update_state(active=earlier[0], phase="active", message=f"rolled back to {earlier[0]}", bad_files=[])
        return earlier[0]


def status(cache_path: str | Path) -> dict[str, dict]:
    """Every model in the cache: its state, the revisions on disk, and the volume's free space."""
    report = {}
    for directory in sorted(Path(cache_path).iterdir()) if Path(cache_path).is_dir() else []:
        store = ModelStore(Path(cache_path), directory.name)
        if store.state_file.exists():
            report[directory.name] = {**store.state(), "active": store.active(), "installed": store.installed(),
                                      "free_bytes": free_bytes(store.root)}
    return report


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
