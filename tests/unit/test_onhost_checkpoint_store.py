"""The host-side checkpoint store on a real filesystem: digests, activation, pruning, rollback, resume."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from k3ops.onhost.checkpoint import fetch, verify
from k3ops.onhost.checkpoint.fetch import FetchConfig, FetchError
from k3ops.onhost.checkpoint.manifest import FileEntry, Manifest
from k3ops.onhost.checkpoint.store import ModelStore, StoreBusy

REV_A = "a" * 40
REV_B = "b" * 40
REV_C = "c" * 40


def entry_for(root, path, lfs=True) -> FileEntry:
    data = (root / path).read_bytes()
    if lfs:
        return FileEntry(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    blob = subprocess.run(["git", "hash-object", str(root / path)], capture_output=True, text=True, check=True)
    return FileEntry(path=path, size=len(data), blob_id=blob.stdout.strip())


def install(store: ModelStore, revision: str, files: dict[str, bytes]) -> Manifest:
    staging = store.staging / revision
    for path, data in files.items():
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        (staging / path).write_bytes(data)
    manifest = Manifest("org/model", revision, tuple(entry_for(staging, path) for path in sorted(files)))
    store.install(manifest)
    return manifest


@pytest.fixture
def store(tmp_path):
    store = ModelStore(tmp_path, "tiny")
    store.create()
    return store


def test_git_blob_ids_are_computed_as_git_does(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}\n')
    entry = entry_for(tmp_path, "config.json", lfs=False)
    assert verify.problem(tmp_path, entry) is None
    (tmp_path / "config.json").write_text('{"model_type": "llamb"}\n')
    assert verify.problem(tmp_path, entry).startswith("git blob id ")


def test_every_kind_of_damage_is_reported(tmp_path):
    for name in ("a.bin", "b.bin", "c.bin"):
        (tmp_path / name).write_bytes(os.urandom(100_000))
    entries = [entry_for(tmp_path, name) for name in ("a.bin", "b.bin", "c.bin")]
    (tmp_path / "a.bin").unlink()
    with open(tmp_path / "b.bin", "r+b") as file:
        file.seek(5000)
        byte = file.read(1)
        file.seek(5000)
        file.write(bytes([byte[0] ^ 1]))
    with open(tmp_path / "c.bin", "ab") as file:
        file.write(b"x")
    found = verify.problems(tmp_path, entries, workers=2)
    assert found["a.bin"] == "missing"
    assert found["b.bin"].startswith("sha256 ")
    assert found["c.bin"] == "size 100001 != 100000"


def test_activation_is_a_relative_link_and_history_allows_rollback(store, tmp_path):
    install(store, REV_A, {"w.bin": b"one"})
    store.activate(REV_A)
    install(store, REV_B, {"w.bin": b"two"})
    store.activate(REV_B)
    assert os.readlink(store.current) == f"revisions/{REV_B}"
    assert (store.current / "w.bin").read_bytes() == b"two"
    assert store.state()["history"] == [REV_A]
    config = FetchConfig(name="tiny", repo_id="org/model", revision=REV_B, cache_path=str(tmp_path),
                         endpoint="http://127.0.0.1:9", headroom_bytes=0, rollback_depth=1)
    assert fetch.rollback(config) == REV_A
    assert (store.current / "w.bin").read_bytes() == b"one"
    assert store.state()["history"] == [REV_B]


def test_prune_keeps_the_active_and_rollback_depth_revisions(store):
    for revision in (REV_A, REV_B, REV_C):
        install(store, revision, {"w.bin": revision.encode()})
        store.activate(revision)
    assert store.prune(keep_previous=1) == [REV_A]
    assert store.installed() == [REV_B, REV_C]
    assert not store.manifest_path(REV_A).exists()
    assert store.prune(keep_previous=0) == [REV_B]
    assert store.installed() == [REV_C]


def test_only_one_writer_at_a_time(store):
    with store.locked():
        with pytest.raises(StoreBusy, match="busy"):
            with store.locked():
                pass


def test_resume_keeps_verified_files_and_links_unchanged_ones(store, tmp_path):
    install(store, REV_A, {"same.bin": b"s" * 1000, "old.bin": b"o" * 10})
    staging = store.staging / REV_B
    staging.mkdir(parents=True)
    (staging / "done.bin").write_bytes(b"d" * 500)
    (staging / "partial.bin").write_bytes(b"p" * 100)
    wanted = [FileEntry("same.bin", 1000, hashlib.sha256(b"s" * 1000).hexdigest()),
              FileEntry("done.bin", 500, hashlib.sha256(b"d" * 500).hexdigest()),
              FileEntry("partial.bin", 300, hashlib.sha256(b"p" * 300).hexdigest()),
              FileEntry("new.bin", 7, hashlib.sha256(b"n" * 7).hexdigest())]
    todo = fetch._missing(staging, wanted, store, REV_B)
    assert [entry.path for entry in todo] == ["partial.bin", "new.bin"]
    assert not (staging / "partial.bin").exists()
    assert os.stat(staging / "same.bin").st_ino == os.stat(store.revisions / REV_A / "same.bin").st_ino


def test_a_download_the_volume_cannot_hold_is_refused_before_it_starts(store, tmp_path):
    config = FetchConfig(name="tiny", repo_id="org/model", revision=REV_A, cache_path=str(tmp_path),
                         endpoint="http://127.0.0.1:9", headroom_bytes=0, rollback_depth=1)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with pytest.raises(FetchError, match=r"not enough space on .* nothing was fetched"):
        fetch._preflight(config, store, [FileEntry("huge.bin", free + 1, "0" * 64)])
    fetch._preflight(config, store, [FileEntry("small.bin", 1, "0" * 64)])


def test_status_reports_each_model(store, tmp_path):
    install(store, REV_A, {"w.bin": b"one"})
    store.activate(REV_A)
    store.update_state(active=REV_A, phase="active")
    report = fetch.status(tmp_path)
    assert report["tiny"]["active"] == REV_A
    assert report["tiny"]["installed"] == [REV_A]
    assert report["tiny"]["free_bytes"] > 0
    assert json.loads(json.dumps(report)) == report


def test_verify_active_records_bad_files_for_the_next_fetch(store, tmp_path):
    install(store, REV_A, {"w.bin": b"one" * 1000, "x.bin": b"two"})
    store.activate(REV_A)
    config = FetchConfig(name="tiny", repo_id="org/model", revision=REV_A, cache_path=str(tmp_path),
                         endpoint="http://127.0.0.1:9", headroom_bytes=0, rollback_depth=1)
    assert fetch.verify_active(config) == []
    (store.revisions / REV_A / "w.bin").write_bytes(b"onf" * 1000)
    assert fetch.verify_active(config) == ["w.bin"]
    assert store.state()["bad_files"] == ["w.bin"]


def test_a_fetch_never_fills_the_filesystem_under_an_unmounted_cache(tmp_path):
    config = FetchConfig(name="tiny", repo_id="org/model", revision=REV_A, cache_path=str(tmp_path),
                         endpoint="http://127.0.0.1:9", headroom_bytes=0, rollback_depth=1, require_mount=True)
    with pytest.raises(FetchError, match="not mounted at"):
        fetch.fetch(config)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address", ["10.0.0.7", "fd6b:3a7b:0:7::11", "gpu-01.rack-a17.example"])
def test_a_peer_is_reached_at_its_address_whatever_its_form(tmp_path, address):
    """The real rsync parses the peer's remote path and hands ssh the host: an IPv6 address whole (rsync
    reads `user@fd00::7:path` as host `fd00`), by a stand-in ssh that records what it was given."""
    from k3ops.onhost.checkpoint.sources import Peer

    given = tmp_path / "ssh-arguments"
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {given}\nexit 1\n")
    ssh.chmod(0o755)
    subprocess.run(["rsync", "-e", str(ssh), "--list-only", Peer(address, "tiny-k3", tmp_path / "key")._remote("x")],
                   capture_output=True, timeout=30)
    arguments = given.read_text().splitlines()
    assert address in arguments and arguments[arguments.index(address) - 1] == "k3ops-peer", arguments


def test_a_staged_revision_stays_beside_the_active_one_until_a_fetch_activates_it(store, tmp_path):
    """A rollout's staging (`activate` false): the revision installed is not made active, a prune of the old
    revision's fetch keeps it, and the fetch that activates it needs no download (the endpoint answers nothing)."""
    install(store, REV_A, {"w.bin": b"one"})
    install(store, REV_B, {"w.bin": b"two"})
    install(store, REV_C, {"w.bin": b"three"})
    store.activate(REV_A)
    store.activate(REV_B)  # REV_A is history: what rollback_depth 1 keeps
    config = FetchConfig(name="tiny", repo_id="org/model", revision=REV_C, cache_path=str(tmp_path),
                         endpoint="http://127.0.0.1:9", headroom_bytes=0, rollback_depth=1, activate=False)
    fetch.fetch(config)
    assert store.active() == REV_B and store.state()["staged"] == REV_C
    fetch.fetch(FetchConfig(**{**config.__dict__, "revision": REV_B, "activate": True}))  # a plain deploy of B
    assert store.installed() == sorted([REV_A, REV_B, REV_C]) and store.active() == REV_B
    fetch.fetch(FetchConfig(**{**config.__dict__, "activate": True}))
    assert store.active() == REV_C and store.state()["staged"] is None
    assert store.installed() == sorted([REV_B, REV_C])  # REV_A past the rollback depth once C is active
