"""The pinned checkpoint on every host, downloaded from the Hub once per fleet.

The first host (in inventory order) of those serving the same revision fetches from the Hub; the
others copy from peers along a binary fan-out tree (host i asks host (i-1)//2, then that host's
parents up to the first), so no host feeds more than two others. Every host verifies its own copy
against the Hub's digests before it activates it.
"""

from __future__ import annotations

import json
import shlex
from os import environ
from urllib.parse import urlsplit

from pyinfra import host
from pyinfra.api import DeployError, QuoteString, StringCommand, deploy
from pyinfra.facts.server import Which
from pyinfra.facts.systemd import SystemdStatus
from pyinfra.operations import files, pip, systemd
from pyinfra.operations.util import any_changed

from ..escape import authorized_keys_line, systemd_value
from ..facts.checkpoint import ModelCheckpoints
from ..onhost import layout
from ..onhost.layout import ENGINE_UNIT, PEER_USER
from ..operations import checkpoint as checkpoint_operations
from ..operations import owned_files, packages, units
from ..settings import host_settings
from ..settings.model import ModelHostSpec
from . import fleet, rendered
from .fleet_keys import ensure_fleet_key
from .onhost import onhost_command, onhost_package
from .secrets import secret_file
from .users import system_user

HUGGINGFACE_HUB = "huggingface_hub==2.4.0"
GIB = 1024**3
RRSYNC = "/usr/bin/rrsync"  # rsync's restricted mode, shipped with Debian's rsync
PEER_KEYS_HEADER = "# Managed by k3ops: peers may only read the model cache (rrsync -ro), nothing else.\n"


@deploy("Pinned checkpoint")
def checkpoint() -> None:
    pinned_checkpoint(activate=True)


@deploy("Stage a model revision")
def staged_checkpoint() -> None:
    """The data's revision fetched and verified beside the active one, which keeps serving: a model rollout stages
    every host before it drains any, so a slow Hub or a bad file is found while the whole fleet serves."""
    pinned_checkpoint(activate=False)


def pinned_checkpoint(activate: bool) -> None:
    settings = host_settings(host)
    spec, model_host = settings.gpu, settings.model
    model = model_host.model
    if model is None:
        host.noop("no model in this host's data")
        return
    if activate:
        refuse_switching_serving_hosts_together(model_host)
    user = spec.service_user
    packages.installed(name="Install what the fetcher and peer copies need",
                       packages=["python3-venv", "rsync", "openssh-client", "openssh-server"])
    fetcher_environment(model_host)
    peer_access(model_host, user)
    token()
    unit_files = [owned_files.config_file(name=f"Unit {unit}", path=f"/etc/systemd/system/{unit}",
                                          content=rendered(f"systemd/{unit}.j2", layout=layout,
                                                           service_user=systemd_value(user),
                                                           service_home=systemd_value(layout.home(user)),
                                                           cache_path=systemd_value(model_host.model_cache_path)))
                  for unit in (layout.FETCH_UNIT_TEMPLATE, layout.VERIFY_UNIT_TEMPLATE, layout.VERIFY_TIMER_TEMPLATE)]
    systemd.daemon_reload(name="Reload systemd for the checkpoint units", _if=any_changed(*unit_files))
    files.directory(name=f"Directory {layout.MODEL_CONFIG_DIR}", path=layout.MODEL_CONFIG_DIR, mode="755")
    owned_files.config_file(name=f"Fetch settings for {model.name}", path=layout.model_config(model.name),
                            content=fetch_config(model_host, activate))
    units.service(name=f"Weekly verification of {model.name}",
                  unit=layout.instance(layout.VERIFY_TIMER_TEMPLATE, model.name), running=True, enabled=True)
    checkpoint_operations.active_revision(
        name=f"Fetch, verify and {'activate' if activate else 'stage'} {model.name} {model.revision}",
        model=model.name, revision=model.revision, cache_path=model_host.model_cache_path, activate=activate)


def refuse_switching_serving_hosts_together(model_host: ModelHostSpec) -> None:
    """A new active revision restarts the engine onto it, minutes of loading weights on K3: a plain deploy that
    would do so on a serving host together with other hosts of the model (the whole fleet dark at once) is
    refused, naming the rollout that moves a group at a time (`switch_refusal`)."""
    model = model_host.model
    if model_host.model_switch_together:
        return
    active = host.get_fact(ModelCheckpoints, cache_path=model_host.model_cache_path).get(model.name, {}).get("active")

    def same_model(other) -> bool:
        theirs = host_settings(other).model.model
        return other.name != host.name and theirs is not None and theirs.name == model.name

    refusal = switch_refusal(host.name, model.name, active, model.revision,
                             bool(host.get_fact(SystemdStatus).get(ENGINE_UNIT)),
                             [other.name for other in fleet.in_this_run(same_model)])
    if refusal:
        raise DeployError(refusal)


def switch_refusal(name: str, model: str, active: str | None, wanted: str, serving: bool,
                   together: list[str]) -> str | None:
    """Why host `name` may not switch `model` from `active` to `wanted` in this run: only when its engine serves
    and the run deploys other hosts of the model (`together`); one host alone, or a fleet not serving, may."""
    if active in (None, wanted) or not serving or not together:
        return None
    return (f"{name}: serves {model} {active} ({ENGINE_UNIT} is running); this deploy would switch it to {wanted} "
            f"and restart its engine together with {', '.join(together)}. Roll a serving fleet a group at a time: "
            f"`k3ops upgrade model INVENTORY --to {wanted}`; or set model_switch_together = True for a fleet that "
            f"may go dark; or, after such a rollout, pin {active} again")


def fetcher_environment(model_host: ModelHostSpec) -> None:
    """A venv with huggingface_hub and the host-side checkpoint store, behind one command."""
    python = host.get_fact(Which, command="python3") or "/usr/bin/python3"
    pip.venv(name=f"Python venv {layout.VENV}", path=layout.VENV, python=python)
    source = model_host.python_find_links or model_host.python_index_url
    where = (["--no-index", "--find-links", QuoteString(source)] if model_host.python_find_links
             else ["--index-url", QuoteString(source)])
    if source.startswith("http://"):  # pip refuses plain HTTP from a host it was not told to trust
        where += ["--trusted-host", QuoteString(urlsplit(source).netloc)]
    index = StringCommand(*where).get_raw_value()
    pip.packages(name=f"Install {HUGGINGFACE_HUB}", packages=[HUGGINGFACE_HUB], virtualenv=layout.VENV,
                 extra_install_args=index)
    onhost_package()
    onhost_command(layout.CHECKPOINT_COMMAND, "k3ops-checkpoint.j2")


def peer_access(model_host: ModelHostSpec, user: str) -> None:
    """Hosts copy from each other as PEER_USER with the fleet's key, which may only read the cache."""
    private_key, public_key = ensure_fleet_key(model_host.model_peer_key, layout.PEER_KEY_NAME)
    system_user(PEER_USER, "Peer copy user", shell="/bin/sh")
    owned_files.file(name="Peers may read the model cache, nothing else", path=layout.PEER_AUTHORIZED_KEYS,
                     content=PEER_KEYS_HEADER + peer_key_line(model_host.model_cache_path, public_key) + "\n",
                     owner=PEER_USER, mode="600")
    owned_files.file(name="The fleet's peer-copy key", path=layout.peer_key(user),
                     content=private_key.read_text(), owner=user, mode="600")


def peer_key_line(cache_path: str, public_key: str) -> str:
    """The peers' authorized_keys line: the fleet key, confined to reading the cache with rrsync."""
    return authorized_keys_line([("restrict", None), ("command", shlex.join([RRSYNC, "-ro", cache_path]))],
                                public_key)


def token() -> None:
    """HF_TOKEN from the deploying shell, into a root-only file that systemd reads for the fetch unit.

    Without HF_TOKEN the host keeps no token: a public model needs none, and a secret no deploy vouches
    for is one nobody rotates. A gated model's deploys therefore always run with HF_TOKEN.
    """
    value = environ.get("HF_TOKEN")
    if value:
        secret_file(layout.TOKEN_FILE, f"HF_TOKEN={value}\n", "Hub token")
    else:
        files.file(name="No Hub token (HF_TOKEN not given)", path=layout.TOKEN_FILE, present=False)


def fetch_config(model_host: ModelHostSpec, activate: bool) -> str:
    """The fetch unit's settings: the pinned revision, where to get its bytes, and whether to make it active."""
    model = model_host.model
    peers = fan_out_sources(host.name, peer_fleet(model_host)) if model_host.model_source == "peers" else []
    return json.dumps({
        "name": model.name, "repo_id": model.repo_id, "revision": model.revision, "activate": activate,
        "allow_patterns": model.allow_patterns, "ignore_patterns": model.ignore_patterns,
        "cache_path": model_host.model_cache_path, "endpoint": model_host.hf_endpoint,
        "headroom_bytes": int(model_host.model_cache_headroom_gib * GIB), "rollback_depth": model.rollback_depth,
        "peers": peers, "peer_wait_seconds": model_host.model_peer_wait_seconds,
        "peer_key": layout.peer_key(host_settings(host).gpu.service_user),
        "require_mount": bool(model_host.nvme_devices),
        "peer_bwlimit_kib": int(model_host.model_peer_bwlimit_mib * 1024) if model_host.model_peer_bwlimit_mib else None,
    }, indent=1, sort_keys=True) + "\n"


def peer_fleet(model_host: ModelHostSpec) -> list[tuple[str, str]]:
    """(name, address) of the inventory's hosts that serve the same revision from peers."""
    def same(other) -> bool:
        data = host_settings(other).model
        return data.model == model_host.model and data.model_source == "peers"

    return [(member.name, host_settings(member).model.address_for_peers(member.name)) for member in fleet.members(same)]


def fan_out_sources(name: str, fleet: list[tuple[str, str]]) -> list[str]:
    """The addresses host `name` copies from, nearest first: its parent in a binary tree, up to the root."""
    index = [member for member, _ in fleet].index(name)
    sources = []
    while index > 0:
        index = (index - 1) // 2
        sources.append(fleet[index][1])
    return sources
