"""The lab's Hub (olah, offline) and wheelhouse, as a model deploy will use them: from the controller
with huggingface_hub, and from a lab host that installs huggingface_hub from the wheelhouse alone."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download, snapshot_download

from k3ops_lab import hub, services, state, wheelhouse

from .conftest import k3ops, on_host

LAB_PROFILES = ("cpu",)
REPO = hub.TINY_MODEL_REPO
LFS_SUFFIXES = (".gguf", ".safetensors")
HOST_VENV = "/opt/k3ops-hf"
HOST_DOWNLOAD = """
import hashlib, sys
from huggingface_hub import hf_hub_download
path = hf_hub_download(sys.argv[1], "tiny-k3.gguf", revision=sys.argv[2], endpoint=sys.argv[3], cache_dir="/tmp/hf")
print(hashlib.sha256(open(path, "rb").read()).hexdigest())
"""


@pytest.fixture(scope="module")
def revisions(lab, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Each pinned revision's files as the builder writes them: what the Hub must serve, byte for byte."""
    files = {}
    for number, sha in enumerate(hub.TINY_MODEL_REVISIONS, start=1):
        directory = tmp_path_factory.mktemp(f"revision-{number}")
        subprocess.run(hub.tiny_model_command(directory, number), check=True)
        files[sha] = {path.name: path.read_bytes() for path in directory.iterdir()}
        files[sha][".gitattributes"] = b"".join(
            f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n".encode() for suffix in LFS_SUFFIXES)
    return files


def api() -> HfApi:
    return HfApi(endpoint=hub.hub_url())


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def file_gets(path: str, revision: str) -> int:
    """Downloads of one file, counted from olah's access lines in the hub's log."""
    return hub.downloads().count((revision, path))


def test_the_hub_serves_the_pinned_commits(lab):
    built = subprocess.run(["git", "-C", str(hub.repo_path()), "rev-list", "--reverse", "main"], check=True,
                           capture_output=True, text=True).stdout.split()
    assert tuple(built) == hub.TINY_MODEL_REVISIONS
    branches = api().list_repo_refs(REPO).branches
    assert [(branch.name, branch.target_commit) for branch in branches] == [("main", hub.TINY_MODEL_REVISIONS[1])]


def test_tree_gives_sizes_and_lfs_hashes(lab, revisions):
    for sha, files in revisions.items():
        entries = {entry.path: entry for entry in api().list_repo_tree(REPO, recursive=True, revision=sha)}
        assert set(entries) == set(files) == set(hub.TINY_MODEL_FILES)
        for name, content in files.items():
            assert entries[name].size == len(content)
            if name.endswith(LFS_SUFFIXES):
                assert entries[name].lfs.sha256 == sha256(content)
            else:
                assert entries[name].lfs is None


def test_paths_info(lab, revisions):
    sha = hub.TINY_MODEL_REVISIONS[0]
    infos = {info.path: info for info in api().get_paths_info(REPO, ["config.json", "tiny-k3.gguf"], revision=sha)}
    gguf = revisions[sha]["tiny-k3.gguf"]
    assert (infos["tiny-k3.gguf"].size, infos["tiny-k3.gguf"].lfs.sha256) == (len(gguf), sha256(gguf))
    assert infos["config.json"].size == len(revisions[sha]["config.json"])


def test_snapshot_download_at_each_revision_is_byte_identical(lab, revisions, tmp_path):
    for sha, files in revisions.items():
        snapshot = snapshot_download(REPO, revision=sha, endpoint=hub.hub_url(), cache_dir=tmp_path / "cache")
        assert {name: (Path(snapshot) / name).read_bytes() for name in files} == files


def test_every_file_download_is_one_access_line(lab, revisions, tmp_path):
    sha = hub.TINY_MODEL_REVISIONS[1]
    before = file_gets("model-00002-of-00002.safetensors", sha)
    path = hf_hub_download(REPO, "model-00002-of-00002.safetensors", revision=sha, endpoint=hub.hub_url(),
                           cache_dir=tmp_path)
    assert Path(path).read_bytes() == revisions[sha]["model-00002-of-00002.safetensors"]
    assert file_gets("model-00002-of-00002.safetensors", sha) == before + 1


def test_a_host_installs_huggingface_hub_from_the_wheelhouse_and_downloads_a_pinned_file(lab, revisions):
    sha = hub.TINY_MODEL_REVISIONS[0]
    on_host("gpu-01", "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv")
    install = shlex.join(["pip", "install", "-q", *wheelhouse.pip_options(), *wheelhouse.WHEELHOUSE_REQUIREMENTS])
    on_host("gpu-01", f"python3 -m venv {HOST_VENV} && {HOST_VENV}/bin/{install}")
    download = on_host("gpu-01", f"{HOST_VENV}/bin/python -c {shlex.quote(HOST_DOWNLOAD)} {REPO} {sha} {hub.hub_url()}")
    assert download.stdout.strip() == sha256(revisions[sha]["tiny-k3.gguf"])


def test_lab_down_stops_the_hub(lab):
    assert services._processes(services.HUB_SIGNATURE)
    k3ops("lab", "down")
    assert services._processes(services.HUB_SIGNATURE) == []
    # This lab's address (another lab, K3OPS_LAB_INSTANCE, may serve its own hub beside it).
    listening = subprocess.run(["ss", "-Hltn", f"src {state.CONTROLLER_ADDRESS} and sport = :{state.HUB_PORT}"],
                               check=True, capture_output=True, text=True).stdout
    assert listening.strip() == ""
