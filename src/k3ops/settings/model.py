"""Which checkpoint a host serves, and where it keeps it: the model cache's part of a host's spec.

A checkpoint is pinned to a full commit sha: a branch moves under a running fleet, and K3's
`--trust-remote-code` would then run code nobody reviewed. Tokens are never inventory data: the
deploy takes HF_TOKEN from the deploying shell's environment.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..onhost import layout
from ..forms import PLAIN_HTTP_SETTING, ControllerPath, PlainText, network_address, not_placeholder, trusted_url

COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
MODEL_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# Where to find the commit to pin, for a branch given instead or the example's placeholder.
REVISION_HINT = ("find it on the repository's 'Files and versions' > 'History' page on the Hub, or with "
                 "`python -c \"import huggingface_hub as h; print(h.model_info('{repo}', revision='main').sha)\"`")
# The cache path reaches `sh -c` in units and authorized_keys' command="...": characters no shell reads.
CACHE_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
# A plain device node: /dev/nvme1n1, /dev/disk/by-id/nvme-X_Y (no `.`, so no `..`, no spaces).
DEVICE_PATH = re.compile(r"^/dev/[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+)*$")
# A volume mounted at a path hides what is beneath it: never at or above a system directory or k3ops's own.
SYSTEM_DIRECTORIES = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root", "/run",
    "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/local/bin",
    "/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/sbin", "/usr/share", "/usr/src",
    "/lib/firmware", "/lib/modules", "/usr/lib/firmware", "/usr/lib/modules",
    "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log", "/var/mail", "/var/opt",
    "/var/run", "/var/spool", "/var/tmp", "/var/www",
    "/var/lib/apt", "/var/lib/containerd", "/var/lib/docker", "/var/lib/dpkg", "/var/lib/systemd",
    layout.CONFIG_DIR, layout.INSTALL_DIR, layout.STATE_DIR,
})
# Trees no volume belongs in: pseudo and boot filesystems, system software, configuration, files
# systemd-tmpfiles cleans, root's home, which the service user cannot enter, and k3ops's own state.
NO_VOLUME_TREES = ("/proc", "/sys", "/dev", "/run", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                   "/etc", "/tmp", "/var/tmp", "/root", layout.STATE_DIR)


class ModelSpec(BaseModel):
    """A checkpoint on the Hub, pinned, and how the engines name it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo_id: str = Field(pattern=REPO_ID, description="Hub repository, e.g. 'moonshotai/Kimi-K3'")
    revision: str = Field(description="the full 40-hex commit sha to serve; never a branch or tag")
    name: str = Field(pattern=MODEL_NAME, description="served model name; also the cache directory's name")
    allow_patterns: list[PlainText] | None = Field(
        None, description="only files matching these globs (e.g. one GGUF quant)")
    ignore_patterns: list[PlainText] | None = Field(None, description="files matching these globs are skipped")
    rollback_depth: int = Field(1, ge=0, le=5, description="previous revisions kept on disk for rollback")

    @field_validator("revision")
    @classmethod
    def _pinned(cls, value: str, info: ValidationInfo) -> str:
        hint = REVISION_HINT.format(repo=info.data.get("repo_id") or "REPO")
        if not COMMIT_SHA.fullmatch(value):
            raise ValueError(f"{value!r} is not a commit sha: pin the full 40-hex commit, not a branch or tag; {hint}")
        return not_placeholder(value, f"the commit you reviewed: {hint}")


class ModelHostSpec(BaseModel):
    """A host's model cache volume and checkpoint: what deploys/model.py reads."""

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    model: ModelSpec | None = Field(None, description="the checkpoint to fetch and serve ({repo_id, revision, name, ...})")
    model_cache_path: str = Field("/srv/k3ops/models", description="mount point of the model cache volume")
    nvme_devices: list[str] = Field(default_factory=list, description="NVMe namespaces for the model cache")
    model_cache_wipe: list[str] = Field(
        default_factory=list,
        description="NVMe devices whose existing (foreign) filesystem may be destroyed; empty: never wipe")
    model_cache_headroom_gib: float = Field(16.0, ge=0, description="free space kept beyond a download")
    model_source: Literal["peers", "hub"] = Field(
        "peers", description="peers: one Hub download per fleet, the other hosts copy from peers; hub: every host "
                             "downloads (from a site mirror in hf_endpoint)")
    model_peer_wait_seconds: int = Field(6 * 3600, ge=0,
                                         description="how long a host waits for its peer's copy before the Hub")
    model_peer_key: ControllerPath = Field("~/.config/k3ops/peer_ed25519",
                                      description="controller path of the fleet's peer-copy SSH key (made when "
                                                  "missing); it can only read the model caches")
    model_peer_bwlimit_mib: float | None = Field(
        None, gt=0, description="cap (MiB/s) on each peer copy, so copying leaves bandwidth for serving; none: no cap")
    peer_address: str | None = Field(None, description="address peers reach this host on (default: its SSH address)")
    allow_plain_http: bool = Field(
        False, description="let http:// URLs carry trust (the Hub, the Python index, signing keys): only on a "
                           "network you control, as the lab's")
    hf_endpoint: str = Field("https://huggingface.co", description="Hub (or site mirror) the checkpoint comes from")
    python_index_url: str = Field("https://pypi.org/simple",
                                  description="package index for the host-side fetcher's venv")
    python_find_links: str | None = Field(
        None, description="a directory of wheels used instead of the index (air-gapped)")
    model_switch_together: bool = Field(
        False, description="let one deploy move serving hosts to a new revision together, every engine restarting "
                           "at once (a fleet whose outage is acceptable); otherwise `k3ops upgrade model` rolls it")

    @model_validator(mode="before")
    @classmethod
    def _peers_reach_the_ssh_address(cls, data):
        """Unless data says otherwise, peers reach a host where SSH does."""
        if isinstance(data, dict) and not data.get("peer_address") and data.get("ssh_hostname"):
            return data | {"peer_address": data["ssh_hostname"]}
        return data

    @field_validator("model_cache_path")
    @classmethod
    def _own_directory(cls, value: str) -> str:
        """The volume is mounted here and the path reaches shell commands: a plain directory of its own."""
        example = "give the model cache a directory of its own, e.g. '/srv/k3ops/models'"
        path = PurePosixPath(value)
        if not CACHE_PATH.fullmatch(value) or ".." in path.parts or str(path) != value:
            raise ValueError(f"{value!r} is not a plain absolute path: letters, digits and ._-/ only, no '..', "
                             f"'//' or trailing '/'; {example}")
        hidden = sorted(system for system in SYSTEM_DIRECTORIES
                        if PurePosixPath(system) == path or path in PurePosixPath(system).parents)
        if hidden:
            system = value if value in hidden else hidden[0]
            raise ValueError(f"{value!r} is or holds the system directory {system}, which the volume mounted there "
                             f"would hide; {example}")
        tree = next((tree for tree in NO_VOLUME_TREES if PurePosixPath(tree) in path.parents), None)
        if tree is not None:
            raise ValueError(f"{value!r} is under {tree}, where no volume belongs; {example}")
        return value

    @field_validator("nvme_devices", "model_cache_wipe")
    @classmethod
    def _devices(cls, value: list[str]) -> list[str]:
        """Plain device nodes, each once: the deploy formats and assembles exactly these."""
        for device in value:
            if not DEVICE_PATH.fullmatch(device):
                raise ValueError(f"{device!r} is not a device path like '/dev/nvme1n1' or '/dev/disk/by-id/nvme-X' "
                                 "(letters, digits, _ - and / only)")
        repeated = sorted({device for device in value if value.count(device) > 1})
        if repeated:
            raise ValueError(f"{repeated[0]!r} is listed more than once; list each device once")
        return value

    @field_validator("hf_endpoint", "python_index_url", "python_find_links")
    @classmethod
    def _trusted(cls, value: str | None, info: ValidationInfo) -> str | None:
        """What these serve runs on the host (code, weights checked against the Hub's own digests): https."""
        return None if value is None else trusted_url(value, info.data.get(PLAIN_HTTP_SETTING) is True)

    @field_validator("peer_address")
    @classmethod
    def _reachable(cls, value: str | None) -> str | None:
        """Peers connect to it with ssh and rsync (by default it is the host's ssh_hostname)."""
        return None if value is None else network_address(value)

    @model_validator(mode="after")
    def _wipe_only_the_cache_devices(self) -> ModelHostSpec:
        foreign = [device for device in self.model_cache_wipe if device not in self.nvme_devices]
        if foreign:
            raise ValueError(f"model_cache_wipe: {foreign[0]!r} is not one of nvme_devices; only a cache device "
                             "may be wiped (list it in nvme_devices too, or remove it here)")
        return self

    @property
    def model_cache_headroom_bytes(self) -> int:
        """The headroom as the doctor and the alerts compare free space with it."""
        return int(self.model_cache_headroom_gib * 1024**3)

    def address_for_peers(self, name: str) -> str:
        """Where other hosts reach the host `name`: its peer_address (by default its SSH address), else the
        name itself, which is what pyinfra connects to."""
        return self.peer_address or name
