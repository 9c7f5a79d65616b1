"""Which engine serves the model on a host, from which recipe: the serving part of a host's spec.

A recipe (k3ops.engines.recipes) is chosen by name and must fit the host's hardware; data can change
any flag (`args`) without code. The engine listens on loopback unless data says otherwise, and then
an API key is required; the key, like HF_TOKEN, lives in a file, never in inventory data.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..engines.recipes import RECIPES, RecipeError, arguments, recipe
from .host import HTTP_URL

DIGEST = r"^sha256:[0-9a-f]{64}$"
SHA256 = r"^[0-9a-f]{64}$"
FLAG = r"^--[a-z0-9][a-z0-9-]*$"


class EngineSpec(BaseModel):
    """An engine instance: the recipe, its pinned artifact, and how it is exposed and watched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str = Field(description="launch recipe (k3ops.engines.recipes), e.g. 'vllm-b300x8'")
    image: str | None = Field(None, description="container image tag (default: the recipe's)")
    image_digest: str | None = Field(None, pattern=DIGEST, description="the image's sha256 digest (containers)")
    binary_url: str | None = Field(None, pattern=HTTP_URL, description="llama-server archive URL (llama.cpp)")
    binary_sha256: str | None = Field(None, pattern=SHA256, description="the archive's sha256 (llama.cpp)")
    model_file: str | None = Field(None, pattern=r"^[^/\s][^\s]*$",
                                   description="llama.cpp: the GGUF (first shard) to load, relative to the revision")
    args: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="flag overrides: a value replaces, true adds, false/null removes")
    environment: dict[str, str] = Field(default_factory=dict, description="extra environment for the engine")
    host: str = Field("127.0.0.1", description="address the API binds to")
    port: int | None = Field(None, ge=1, le=65535, description="API port (default: the recipe's)")
    api_key_file: str | None = Field(None, description="controller path of the API key file (needed off loopback)")
    cluster: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]*$",
                                description="multi-node recipes: hosts with the same cluster serve together")
    start_timeout_seconds: int = Field(3600, ge=60, description="systemd start timeout: loading hundreds of GB")
    ready_timeout_seconds: int = Field(3600, ge=10, description="how long the deploy waits for the engine to answer")
    health_interval_seconds: int = Field(30, ge=5, description="watchdog: seconds between health checks")
    health_failures: int = Field(3, ge=1, description="watchdog: failed checks in a row before a restart")

    @field_validator("recipe")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in RECIPES:
            raise ValueError(f"unknown recipe {value!r}; known: {', '.join(RECIPES)}")
        return value

    @field_validator("args")
    @classmethod
    def _flags(cls, value: dict) -> dict:
        for flag in value:
            if not re.match(FLAG, flag):
                raise ValueError(f"{flag!r} is not a long flag like '--max-model-len'")
        return value

    @field_validator("host")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address (bind to one address, e.g. 127.0.0.1)") from None
        return value

    @model_validator(mode="after")
    def _complete(self) -> EngineSpec:
        found = RECIPES[self.recipe]
        if not ipaddress.ip_address(self.host).is_loopback and self.api_key_file is None:
            raise ValueError(f"host: {self.host} is not loopback, so api_key_file is required")
        if self.api_key_file is not None and found.engine == "sglang":
            raise ValueError("api_key_file: SGLang reads its key only from its command line, where `ps` shows it; "
                             "keep SGLang on loopback behind a proxy that checks keys")
        if found.image is not None and self.image_digest is None:
            raise ValueError(f"image_digest: recipe {self.recipe!r} runs a container; pin its image by digest "
                             "(`docker buildx imagetools inspect IMAGE` prints it)")
        if found.image is None and (self.binary_url is None or self.binary_sha256 is None):
            raise ValueError(f"binary_url: recipe {self.recipe!r} runs a native llama-server; give binary_url and "
                             "binary_sha256 of a pinned build")
        if found.engine == "llama.cpp" and self.model_file is None:
            raise ValueError("model_file: llama-server loads one GGUF file (the first shard of a split model); "
                             "name it, relative to the revision, e.g. 'UD-Q4_K_XL/Kimi-K3-UD-Q4_K_XL-00001-of-00013.gguf'")
        if found.nodes > 1 and self.cluster is None:
            raise ValueError(f"cluster: recipe {self.recipe!r} spans {found.nodes} hosts; name the cluster they form")
        try:
            arguments(found, self.args)
        except RecipeError as error:
            raise ValueError(f"args: {error}") from None
        return self


class EngineHostSpec(BaseModel):
    """A host's engine, checked against its hardware and model."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    engine: EngineSpec | None = Field(None, description="the engine serving the model ({recipe, ...})")

    @model_validator(mode="before")
    @classmethod
    def _fits_the_host(cls, data: dict) -> dict:
        engine = data.get("engine") if isinstance(data, dict) else None
        if isinstance(engine, dict) and engine.get("recipe") in RECIPES:
            try:
                recipe(engine["recipe"], data.get("hardware_profile", ""))
            except RecipeError as error:
                raise ValueError(f"engine.recipe: {error}") from None
            if data.get("model") is None:
                raise ValueError("engine: an engine needs a model to serve (set model)")
        return data


def cluster_errors(engines: list[tuple[str, EngineSpec]]) -> list[str]:
    """Hosts sharing `engine.cluster`, checked together: one recipe, and exactly as many hosts as it spans.

    A missing or extra rank would show only at start, as a multi-node engine hanging in its NCCL init.
    """
    clusters: dict[str, list[tuple[str, EngineSpec]]] = {}
    for name, engine in engines:
        if engine.cluster is not None:
            clusters.setdefault(engine.cluster, []).append((name, engine))
    errors = []
    for cluster, members in clusters.items():
        (head, head_engine), names = members[0], ", ".join(name for name, _ in members)
        others = [f"{name}: engine.recipe: cluster {cluster!r} runs {head_engine.recipe!r} (as on {head}), "
                  f"not {engine.recipe!r}" for name, engine in members[1:] if engine.recipe != head_engine.recipe]
        nodes = RECIPES[head_engine.recipe].nodes
        if not others and len(members) != nodes:
            others.append(f"{names}: engine.cluster: {cluster!r} has {len(members)} hosts, but recipe "
                          f"{head_engine.recipe!r} spans {nodes}")
        errors += others
    return errors
