"""Which checkpoint a host serves, and where it keeps it: the model cache's part of a host's spec.

A checkpoint is pinned to a full commit sha: a branch moves under a running fleet, and K3's
`--trust-remote-code` would then run code nobody reviewed. Tokens are never inventory data: the
deploy takes HF_TOKEN from the deploying shell's environment.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .host import HTTP_URL

COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
MODEL_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
ABSOLUTE_PATH = r"^/[^\s]*[^/\s]$"
DEVICE_PATH = r"^/dev/\S+$"


class ModelSpec(BaseModel):
    """A checkpoint on the Hub, pinned, and how the engines name it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo_id: str = Field(pattern=REPO_ID, description="Hub repository, e.g. 'moonshotai/Kimi-K3'")
    revision: str = Field(description="the full 40-hex commit sha to serve; never a branch or tag")
    name: str = Field(pattern=MODEL_NAME, description="served model name; also the cache directory's name")
    allow_patterns: list[str] | None = Field(None, description="only files matching these globs (e.g. one GGUF quant)")
    ignore_patterns: list[str] | None = Field(None, description="files matching these globs are skipped")
    rollback_depth: int = Field(1, ge=0, le=5, description="previous revisions kept on disk for rollback")

    @field_validator("revision")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not COMMIT_SHA.match(value):
            raise ValueError(
                f"{value!r} is not a commit sha: pin the full 40-hex commit, not a branch or tag. Find it on the "
                "repository's 'Files and versions' > 'History' page on the Hub, or with "
                "`python -c \"import huggingface_hub as h; print(h.model_info('REPO', revision='main').sha)\"`")
        return value


class ModelHostSpec(BaseModel):
    """A host's model cache volume and checkpoint: what deploys/model.py reads."""

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    model: ModelSpec | None = Field(None, description="the checkpoint to fetch and serve ({repo_id, revision, name, ...})")
    model_cache_path: str = Field("/srv/k3ops/models", pattern=ABSOLUTE_PATH,
                                  description="mount point of the model cache volume")
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
    model_peer_key: str = Field("~/.config/k3ops/peer_ed25519",
                                description="controller path of the fleet's peer-copy SSH key (made when missing); "
                                            "it can only read the model caches")
    model_peer_bwlimit_mib: float | None = Field(
        None, gt=0, description="cap (MiB/s) on each peer copy, so copying leaves bandwidth for serving; none: no cap")
    peer_address: str | None = Field(None, description="address peers reach this host on (default: its SSH address)")
    hf_endpoint: str = Field("https://huggingface.co", pattern=HTTP_URL,
                             description="Hub (or site mirror) the checkpoint comes from")
    python_index_url: str = Field("https://pypi.org/simple", pattern=HTTP_URL,
                                  description="package index for the host-side fetcher's venv")
    python_find_links: str | None = Field(None, pattern=HTTP_URL,
                                          description="a directory of wheels used instead of the index (air-gapped)")

    @model_validator(mode="before")
    @classmethod
    def _peers_reach_the_ssh_address(cls, data):
        """Unless data says otherwise, peers reach a host where SSH does."""
        if isinstance(data, dict) and not data.get("peer_address") and data.get("ssh_hostname"):
            return data | {"peer_address": data["ssh_hostname"]}
        return data

    @field_validator("nvme_devices", "model_cache_wipe")
    @classmethod
    def _devices(cls, value: list[str]) -> list[str]:
        for device in value:
            if not re.match(DEVICE_PATH, device):
                raise ValueError(f"{device!r} is not a device path like '/dev/nvme1n1'")
        return value

    def address_for_peers(self, name: str) -> str:
        """Where other hosts reach the host `name`: its peer_address (by default its SSH address), else the
        name itself, which is what pyinfra connects to."""
        return self.peer_address or name
