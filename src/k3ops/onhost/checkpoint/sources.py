"""Where a revision's bytes come from: the Hub (or a site mirror), or a peer that already verified them.

The Hub's metadata at the pinned commit is the trust root for every host: a peer supplies bytes
only, and each host checks them against the digests the Hub gave it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..layout import MANIFESTS_DIR, PEER_USER, REVISIONS_DIR, STORE_STATE_FILE
from .manifest import FileEntry, Manifest

HUB_DOWNLOAD_WORKERS = 8
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15",
               # Bytes from a peer are checked against the Hub's digests, so the peer's identity is not the trust root.
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR")


def hub_manifest(repo_id: str, revision: str, endpoint: str, allow_patterns=None, ignore_patterns=None) -> Manifest:
    """Every file at the commit with its size and digest, from the Hub's tree listing (HF_TOKEN from the environment)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    tree = [item for item in HfApi(endpoint=endpoint).list_repo_tree(repo_id, revision=revision, recursive=True)
            if isinstance(item, RepoFile)]
    chosen = filter_repo_objects(tree, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
                                 key=lambda item: item.path)
    files = tuple(sorted((FileEntry(path=item.path, size=item.size, blob_id=item.blob_id,
                                    sha256=item.lfs["sha256"] if item.lfs else None) for item in chosen),
                         key=lambda entry: entry.path))
    if not files:
        raise RuntimeError(f"{repo_id}@{revision} has no files matching allow_patterns={allow_patterns} "
                           f"ignore_patterns={ignore_patterns}")
    return Manifest(repo_id=repo_id, revision=revision, files=files)


def download_from_hub(manifest: Manifest, entries: list[FileEntry], destination: Path, endpoint: str) -> int:
    """Download files into `destination`; returns the bytes fetched."""
    from huggingface_hub import hf_hub_download

    def one(entry: FileEntry) -> int:
        hf_hub_download(manifest.repo_id, entry.path, revision=manifest.revision, local_dir=destination,
                        endpoint=endpoint)
        return entry.size

    with ThreadPoolExecutor(max_workers=HUB_DOWNLOAD_WORKERS) as pool:
        fetched = sum(pool.map(one, entries))
    shutil.rmtree(destination / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping for local_dir
    return fetched


class Peer:
    """Another host's verified revisions, read through its restricted, read-only rsync login."""

    def __init__(self, address: str, name: str, key: Path, bwlimit_kib: int | None = None):
        self.address = address
        self.name = name
        self.key = key
        self.bwlimit_kib = bwlimit_kib

    def __str__(self) -> str:
        return self.address

    def _rsync(self, *arguments: str) -> subprocess.CompletedProcess:
        ssh = " ".join(["ssh", "-i", str(self.key), *SSH_OPTIONS])
        return subprocess.run(["rsync", "-e", ssh, *arguments], capture_output=True, text=True)

    def _remote(self, path: str) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address  # rsync's form of an IPv6 address
        return f"{PEER_USER}@{host}:{self.name}/{path}"

    def has(self, revision: str) -> bool:
        """The peer has installed (verified) the revision."""
        return self._rsync("--list-only", self._remote(f"{MANIFESTS_DIR}/{revision}.json")).returncode == 0

    def state(self) -> dict:
        with tempfile.TemporaryDirectory() as directory:
            if self._rsync(self._remote(STORE_STATE_FILE), directory).returncode != 0:
                return {}
            return json.loads((Path(directory) / STORE_STATE_FILE).read_text())

    def pull(self, revision: str, entries: list[FileEntry], destination: Path) -> int:
        """Copy files into `destination`; a partial file is kept and continued by the next pull."""
        with tempfile.NamedTemporaryFile("w", suffix=".files") as listing:
            listing.write("".join(f"{entry.path}\n" for entry in entries))
            listing.flush()
            limit = [f"--bwlimit={self.bwlimit_kib}"] if self.bwlimit_kib else []
            # %b: the bytes this pull moved (a resumed file counts only its rest).
            result = self._rsync("--recursive", "--times", "--partial", *limit, "--files-from", listing.name,
                                 "--out-format", "%b %n", self._remote(f"{REVISIONS_DIR}/{revision}/"), f"{destination}/")
        if result.returncode != 0:
            raise RuntimeError(f"rsync from {self.address} failed ({result.returncode}): {result.stderr.strip()}")
        return sum(int(line.split(" ", 1)[0]) for line in result.stdout.splitlines()
                   if line and not line.endswith("/") and line.split(" ", 1)[0].isdigit())
