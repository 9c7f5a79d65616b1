"""The lab's Hugging Face Hub: olah, offline, serving a local git mirror of the tiny model.

Model deploys fetch by repository and pinned revision from a Hub endpoint; on the lab that endpoint is
olah (a self-hosted Hub mirror) on the controller, which serves git repositories under its mirrors
path and never reaches out. The one repository, `k3ops-lab/tiny-k3`, is built here without git-lfs:
LFS pointer files are written by hand and the objects stored where a clone keeps them
(`.git/lfs/objects/aa/bb/<oid>`), which is where olah reads them. Commits carry fixed authors and
dates, so their shas are the same on every machine and deploys can pin them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import cache, services, state

# The hub's own Python: olah to serve, and what tiny_model.py needs to write the model.
VENV_REQUIREMENTS = ("olah==0.5.4", "gguf==0.19.0", "numpy==2.4.6", "safetensors==0.8.0")
TINY_MODEL_REPO = "k3ops-lab/tiny-k3"
# The commits of revisions 1 and 2, in order, and what each answers whatever the prompt (tiny_model.py
# builds it so): tests tell from a reply which revision a host serves. A build that makes other shas
# fails (see _check_revisions).
TINY_MODEL_REPLIES = {
    "7a041ba6203712af5a8e8d9a13fe0be97269a7ee": "k3lab-r1!",
    "f6cf1f293b9cda7bb17785f19a694ddc7017f0ba": "k3lab-r2!",
}
TINY_MODEL_REVISIONS = tuple(TINY_MODEL_REPLIES)
TINY_MODEL_FILES = (
    ".gitattributes", "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    "model.safetensors.index.json", "tiny-k3.gguf", "tokenizer.json", "tokenizer_config.json",
)
LFS_SUFFIXES = (".gguf", ".safetensors")
COMMIT_DATES = ("2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00")
AUTHOR = ("k3ops lab", "lab@k3ops.invalid")
TINY_MODEL_SCRIPT = Path(__file__).with_name("tiny_model.py")
# Run by the venv's python: the pinned versions are installed, and what tiny_model.py imports loads.
VENV_CHECK = """
import sys
from importlib.metadata import version
wanted = dict(requirement.split("==") for requirement in sys.argv[1:])
installed = {name: version(name) for name in wanted}
assert installed == wanted, f"installed {installed}, not the pinned {wanted}"
import gguf, numpy, safetensors
"""
BUILT_FROM = "k3ops.built-from"  # the repository's git config entry: the fingerprint of what made it
# Upstream Hub addresses olah would use online: loopback, so that even a mistaken online mode
# reaches nothing outside this machine.
NOWHERE = "127.0.0.1:9"
OLAH_CONFIG = """[basic]
host = "{address}"
port = {port}
repos-path = "{repos}"
mirrors-path = ["{mirrors}"]
mirror-scheme = "http"
mirror-netloc = "{address}:{port}"
mirror-lfs-netloc = "{address}:{port}"
hf-scheme = "http"
hf-netloc = "{nowhere}"
hf-lfs-netloc = "{nowhere}"

[accessibility]
offline = true
"""


def downloads() -> list[tuple[str, str]]:
    """(revision, path) of every file the hub has served whole, one entry per download, from olah's access lines
    in its log: what proves a fetch took its bytes from the Hub, or did not."""
    log = (state.STATE_DIR / "run" / "hub.log").read_text()
    return re.findall(r'"GET /[^ ]*/resolve/([0-9a-f]{40})/(\S+) HTTP/1\.1" 200', log)


def hub_url() -> str:
    return f"http://{state.CONTROLLER_ADDRESS}:{state.HUB_PORT}"


def root() -> Path:
    return state.CACHE_DIR / "hub"


def mirrors() -> Path:
    return root() / "mirrors"


def repo_path() -> Path:
    return mirrors() / "models" / TINY_MODEL_REPO


def venv() -> Path:
    """The hub's venv (a symlink to where it was built: a venv cannot be moved)."""
    return root() / "venv"


def venv_python() -> Path:
    return venv() / "bin" / "python"


def tiny_model_command(directory: Path, revision: int) -> list[str]:
    """Write revision 1, 2, ... of the tiny model into `directory` (with the hub's venv)."""
    return [str(venv_python()), str(TINY_MODEL_SCRIPT), str(directory), "--revision", str(revision),
            "--replies", *TINY_MODEL_REPLIES.values()]


def build(log=print) -> Path:
    """The hub's venv and the tiny model's repository, each rebuilt when missing, broken or out of date."""
    cache.entry(venv(), f"hub venv ({', '.join(VENV_REQUIREMENTS)})", _build_venv, check_venv, log, movable=False)
    return cache.entry(repo_path(), f"hub repository {TINY_MODEL_REPO}", _build_repository, check_repository, log)


def check_venv(directory: Path) -> None:
    """pip works and finds every dependency installed, the pinned versions are there, tiny_model.py's
    imports load, and olah-cli starts: the venv as hub.start() and tiny_model_command() use it."""
    python = directory / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "check"], check=True, capture_output=True, text=True)
    subprocess.run([str(python), "-c", VENV_CHECK, *VENV_REQUIREMENTS], check=True, capture_output=True, text=True)
    subprocess.run([str(directory / "bin" / "olah-cli"), "--help"], check=True, capture_output=True, text=True)


def check_repository(repo: Path) -> None:
    """Built from today's inputs, its git objects sound, its commits the pinned ones, and the LFS object
    of every pointer in them stored whole."""
    built_from = _git(repo, "config", "--default", "nothing recorded", "--get", BUILT_FROM).strip()
    if built_from != _repository_fingerprint():
        raise RuntimeError(f"{repo} was built from other inputs ({BUILT_FROM}: {built_from})")
    _git(repo, "fsck", "--no-progress")
    _check_revisions(repo)
    pointers = [_git(repo, "show", f"{revision}:{name}") for revision in TINY_MODEL_REVISIONS
                for name in TINY_MODEL_FILES if name.endswith(LFS_SUFFIXES)]
    for pointer in pointers:
        fields = dict(line.split(" ", 1) for line in pointer.splitlines())
        stored = _lfs_object(repo, fields["oid"].removeprefix("sha256:"))
        if not stored.is_file() or stored.stat().st_size != int(fields["size"]):
            raise RuntimeError(f"{repo}: LFS object {stored} is missing or cut short")


def start() -> None:
    """Serve the mirror with olah on the controller's lab address; wait until it answers."""
    config = state.STATE_DIR / "hub" / "olah.toml"
    repos = state.STATE_DIR / "hub" / "repos"
    repos.mkdir(parents=True, exist_ok=True)
    config.write_text(OLAH_CONFIG.format(address=state.CONTROLLER_ADDRESS, port=state.HUB_PORT, repos=repos,
                                         mirrors=mirrors(), nowhere=NOWHERE))
    services.start_hub(venv() / "bin" / "olah-cli", config)
    services.wait_until_listening(ports=(state.HUB_PORT,), timeout=60)


def _build_venv(directory: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True, capture_output=True, text=True)
    subprocess.run([str(directory / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *VENV_REQUIREMENTS], check=True, capture_output=True, text=True)


def _build_repository(repo: Path) -> None:
    """Revision 1 and 2 of the tiny model, committed with their LFS objects, and what they were built from."""
    _git(repo, "init", "-q", "-b", "main")
    with tempfile.TemporaryDirectory() as scratch:
        for number, date in enumerate(COMMIT_DATES, start=1):
            files = Path(scratch) / f"revision-{number}"
            subprocess.run(tiny_model_command(files, number), check=True, capture_output=True, text=True)
            _commit_revision(repo, files, f"{TINY_MODEL_REPO} revision {number}", date)
    _git(repo, "config", BUILT_FROM, _repository_fingerprint())


def _repository_fingerprint() -> str:
    return _fingerprint(TINY_MODEL_SCRIPT.read_bytes(), *VENV_REQUIREMENTS, TINY_MODEL_REPO,
                        *TINY_MODEL_REPLIES.values(), *LFS_SUFFIXES, *COMMIT_DATES, *AUTHOR)


def add_repository(repo_id: str, files: Path) -> str:
    """Publish a directory of files (LFS objects hard-linked, not copied) as a one-commit repository on
    the lab's Hub, e.g. a benchmark's large shards; returns the commit sha."""
    repo = mirrors() / "models" / repo_id
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _commit_revision(repo, files, repo_id, COMMIT_DATES[0])
    return _git(repo, "rev-parse", "HEAD").strip()


def remove_repository(repo_id: str) -> None:
    shutil.rmtree(mirrors() / "models" / repo_id, ignore_errors=True)


def _commit_revision(repo: Path, files: Path, message: str, date: str) -> None:
    """Replace the work tree with one revision's files (LFS ones as pointers) and commit it."""
    for old in repo.iterdir():
        if old.name != ".git":
            old.unlink()
    (repo / ".gitattributes").write_text(
        "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES))
    for source in sorted(files.iterdir()):
        if source.suffix in LFS_SUFFIXES:
            (repo / source.name).write_text(_store_lfs_object(repo, source))
        else:
            shutil.copyfile(source, repo / source.name)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, date=date)


def _store_lfs_object(repo: Path, source: Path) -> str:
    """Store the file as git-lfs does (a hard link where the filesystem allows) and return its pointer (spec v1)."""
    digest = hashlib.sha256()
    with open(source, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    oid = digest.hexdigest()
    target = _lfs_object(repo, oid)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {source.stat().st_size}\n"


def _lfs_object(repo: Path, oid: str) -> Path:
    return repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def _check_revisions(repo: Path) -> None:
    built = tuple(_git(repo, "rev-list", "--reverse", "main").split())
    if built != TINY_MODEL_REVISIONS:
        raise RuntimeError(f"the tiny model's commits are {built}, not those of TINY_MODEL_REPLIES {TINY_MODEL_REVISIONS}: "
                           "its files changed, so update TINY_MODEL_REPLIES in lab/src/k3ops_lab/hub.py")


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    """git with no user or system configuration, and fixed identities, so commits are reproducible."""
    name, email = AUTHOR
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
           "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    if date:
        env |= {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True,
                          text=True).stdout


def _fingerprint(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()
