"""The pinned checkpoint on every host, downloaded from the Hub once per fleet.

The first host (in inventory order) of those serving the same revision fetches from the Hub; the
others copy from peers along a binary fan-out tree (host i asks host (i-1)//2, then that host's
parents up to the first), so no host feeds more than two others. Every host verifies its own copy
against the Hub's digests before it activates it.
"""

from __future__ import annotations

import json
import subprocess
from io import StringIO
from os import environ
from pathlib import Path
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Which
from pyinfra.operations import apt, files, pip, server, systemd

from .. import checkpoint as checkpoint_package
from ..facts.checkpoint import CHECKPOINT_COMMAND
from ..operations import checkpoint
from ..spec import host_spec, model_host_spec
from ..spec.model import ModelHostSpec
from . import TEMPLATES, fleet

HUGGINGFACE_HUB = "huggingface_hub==2.4.0"
VENV = "/opt/k3ops/venv"
LIBRARY = "/opt/k3ops/lib"
CONFIG_DIR = "/etc/k3ops/models"
TOKEN_FILE = "/etc/k3ops/hf.env"
PEER_USER = "k3ops-peer"
GIB = 1024**3


@deploy("Pinned checkpoint")
def pinned_checkpoint() -> None:
    spec, model_host = host_spec(host), model_host_spec(host)
    model = model_host.model
    if model is None:
        host.noop("no model in this host's data")
        return
    user = spec.service_user
    apt.packages(name="Install what the fetcher and peer copies need", no_recommends=True,
                 packages=["python3-venv", "rsync", "openssh-client", "openssh-server"])
    fetcher_environment(model_host)
    peer_access(model_host, user)
    token()
    units = [files.template(name=f"Unit {unit}", src=str(TEMPLATES / "systemd" / f"{unit}.j2"),
                            dest=f"/etc/systemd/system/{unit}", mode="644", service_user=user,
                            cache_path=model_host.model_cache_path, token_file=TOKEN_FILE,
                            checkpoint_command=CHECKPOINT_COMMAND)
             for unit in ("k3ops-model-fetch@.service", "k3ops-model-verify@.service", "k3ops-model-verify@.timer")]
    systemd.daemon_reload(name="Reload systemd for the checkpoint units", _if=lambda: any(u.did_change() for u in units))
    files.directory(name=f"Directory {CONFIG_DIR}", path=CONFIG_DIR, mode="755")
    files.put(name=f"Fetch settings for {model.name}", src=StringIO(fetch_config(model_host)),
              dest=f"{CONFIG_DIR}/{model.name}.json", mode="644")
    systemd.service(name=f"Weekly verification of {model.name}", service=f"k3ops-model-verify@{model.name}.timer",
                    running=True, enabled=True)
    checkpoint.active_revision(name=f"Fetch, verify and activate {model.name} {model.revision}", model=model.name,
                               revision=model.revision, cache_path=model_host.model_cache_path)


def fetcher_environment(model_host: ModelHostSpec) -> None:
    """A venv with huggingface_hub and the k3ops_checkpoint package, behind one command."""
    python = host.get_fact(Which, command="python3") or "/usr/bin/python3"
    pip.venv(name=f"Python venv {VENV}", path=VENV, python=python)
    source = model_host.python_find_links or model_host.python_index_url
    index = (f"--no-index --find-links {source}" if model_host.python_find_links else f"--index-url {source}")
    if source.startswith("http://"):  # pip refuses plain HTTP from a host it was not told to trust
        index += f" --trusted-host {urlsplit(source).netloc}"
    pip.packages(name=f"Install {HUGGINGFACE_HUB}", packages=[HUGGINGFACE_HUB], virtualenv=VENV,
                 extra_install_args=index)
    files.sync(name="Install the k3ops_checkpoint package", src=str(Path(checkpoint_package.__file__).parent),
               dest=f"{LIBRARY}/k3ops_checkpoint", delete=True, exclude=["*.pyc", "__pycache__"])
    files.template(name=f"Command {CHECKPOINT_COMMAND}", src=str(TEMPLATES / "k3ops" / "k3ops-checkpoint.j2"),
                   dest=CHECKPOINT_COMMAND, mode="755", library=LIBRARY, venv=VENV)


def peer_access(model_host: ModelHostSpec, user: str) -> None:
    """Hosts copy from each other as PEER_USER with the fleet's key, which may only read the cache."""
    private_key = Path(model_host.model_peer_key).expanduser()
    ensure_peer_key(private_key)
    server.user(name=f"Peer copy user {PEER_USER}", user=PEER_USER, system=True, shell="/bin/sh",
                home=f"/var/lib/{PEER_USER}", create_home=True)
    files.directory(name=f"Directory ~{PEER_USER}/.ssh", path=f"/var/lib/{PEER_USER}/.ssh", user=PEER_USER,
                    group=PEER_USER, mode="700")
    files.template(name="Peers may read the model cache, nothing else",
                   src=str(TEMPLATES / "k3ops" / "peer-authorized-keys.j2"),
                   dest=f"/var/lib/{PEER_USER}/.ssh/authorized_keys", user=PEER_USER, group=PEER_USER, mode="600",
                   cache_path=model_host.model_cache_path,
                   public_key=private_key.with_suffix(".pub").read_text().strip())
    files.directory(name=f"Directory ~{user}/.ssh", path=f"/var/lib/{user}/.ssh", user=user, group=user, mode="700")
    files.put(name="The fleet's peer-copy key", src=str(private_key), dest=peer_key_path(user), user=user, group=user,
              mode="600")


def ensure_peer_key(path: Path) -> None:
    """Make the fleet's peer-copy key on the controller the first time (an ed25519 key, no passphrase)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3ops-peers", "-f", str(path)],
                       check=True)


def peer_key_path(user: str) -> str:
    return f"/var/lib/{user}/.ssh/k3ops-peers"


def token() -> None:
    """HF_TOKEN from the deploying shell, into a root-only file that systemd reads for the fetch unit.

    Without HF_TOKEN in the environment an existing file is left as it is (public models need none).
    """
    files.directory(name="Directory /etc/k3ops", path="/etc/k3ops", mode="755")
    value = environ.get("HF_TOKEN")
    if value:
        files.put(name=f"Hub token in {TOKEN_FILE}", src=StringIO(f"HF_TOKEN={value}\n"), dest=TOKEN_FILE,
                  user="root", group="root", mode="600")


def fetch_config(model_host: ModelHostSpec) -> str:
    """The fetch unit's settings: the pinned revision and where to get its bytes."""
    model = model_host.model
    peers = fan_out_sources(host.name, peer_fleet(model_host)) if model_host.model_source == "peers" else []
    return json.dumps({
        "name": model.name, "repo_id": model.repo_id, "revision": model.revision,
        "allow_patterns": model.allow_patterns, "ignore_patterns": model.ignore_patterns,
        "cache_path": model_host.model_cache_path, "endpoint": model_host.hf_endpoint,
        "headroom_bytes": int(model_host.model_cache_headroom_gib * GIB), "rollback_depth": model.rollback_depth,
        "peers": peers, "peer_wait_seconds": model_host.model_peer_wait_seconds,
        "peer_key": peer_key_path(host_spec(host).service_user),
        "require_mount": bool(host_spec(host).nvme_devices),
        "peer_bwlimit_kib": int(model_host.model_peer_bwlimit_mib * 1024) if model_host.model_peer_bwlimit_mib else None,
    }, indent=1, sort_keys=True) + "\n"


def peer_fleet(model_host: ModelHostSpec) -> list[tuple[str, str]]:
    """(name, address) of the inventory's hosts that serve the same revision from peers."""
    def same(other) -> bool:
        data = ModelHostSpec.model_validate(other.data.dict())
        return data.model == model_host.model and data.model_source == "peers"

    return [(member.name, fleet.address(member)) for member in fleet.members(same)]


def fan_out_sources(name: str, fleet: list[tuple[str, str]]) -> list[str]:
    """The addresses host `name` copies from, nearest first: its parent in a binary tree, up to the root."""
    index = [member for member, _ in fleet].index(name)
    sources = []
    while index > 0:
        index = (index - 1) // 2
        sources.append(fleet[index][1])
    return sources
