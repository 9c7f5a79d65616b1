"""Checking files against a manifest: sizes first (free), then digests, hashed in parallel.

hashlib releases the GIL while it hashes a large buffer, so threads hash several files at once on
all cores; a checkpoint is tens of shards, so parallelism across files is what matters.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .manifest import FileEntry

CHUNK_BYTES = 4 * 1024 * 1024


def digest(path: Path, entry: FileEntry) -> str:
    """The digest of a file in the form the manifest has for it: sha256, or else the git blob id."""
    if entry.sha256 is not None:
        hasher = hashlib.sha256()
    else:
        hasher = hashlib.sha1()
        hasher.update(b"blob %d\0" % entry.size)
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while count := file.readinto(buffer):
            hasher.update(view[:count])
    return hasher.hexdigest()


def problem(root: Path, entry: FileEntry, check_digest: bool = True) -> str | None:
    """Why `root/entry.path` is not the manifest's file, or None when it is."""
    path = root / entry.path
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    if size != entry.size:
        return f"size {size} != {entry.size}"
    if not check_digest:
        return None
    expected = entry.sha256 or entry.blob_id
    if expected is None:
        return None
    actual = digest(path, entry)
    if actual != expected:
        return f"{'sha256' if entry.sha256 else 'git blob id'} {actual} != {expected}"
    return None


def problems(root: Path, entries: list[FileEntry] | tuple[FileEntry, ...], workers: int | None = None,
             check_digest: bool = True) -> dict[str, str]:
    """Every file under `root` that differs from its entry, with why; largest files start first."""
    ordered = sorted(entries, key=lambda entry: entry.size, reverse=True)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        found = pool.map(lambda entry: problem(root, entry, check_digest), ordered)
        return {entry.path: reason for entry, reason in zip(ordered, found) if reason is not None}
