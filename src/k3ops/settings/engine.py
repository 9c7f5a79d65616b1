"""Which engine serves the model on a host, from which recipe: the serving part of a host's spec.

A recipe (k3ops.engines.recipes) is chosen by name and must fit the host's hardware; data can change
any flag (`args`) without code. The engine listens on loopback unless data says otherwise, and then
an API key is required; the key, like HF_TOKEN, lives in a file, never in inventory data.
"""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..engines.recipes import RECIPES, RecipeError, arguments, recipe
from ..onhost.layout import API_KEY_VARIABLES
from ..forms import ControllerPath, HttpUrl, IpAddress, environment, not_placeholder, plain, relative_path

DIGEST = r"^sha256:[0-9a-f]{64}$"
SHA256 = r"^[0-9a-f]{64}$"
FLAG = r"^--[a-z0-9][a-z0-9-]*$"
# A negative number is an argument; any other value starting with `-` would be read as a flag of its own.
NUMBER = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?$")
# Secrets reach the engine from the root-only secrets file, never from data (a unit file anyone reads).
SECRET_VARIABLES = frozenset({*API_KEY_VARIABLES.values(), "HF_TOKEN"})
# registry/repository[:tag] (Docker's reference grammar without the digest, which is image_digest): an
# optional registry (a host with a dot or a port, or localhost), lowercase path components, and a tag of
# word characters, dots and dashes.
_DOMAIN_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REGISTRY = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})+(?::[0-9]+)?|{_DOMAIN_PART}:[0-9]+|localhost)"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(rf"^(?:{_REGISTRY}/)?{_PATH_PART}(?:/{_PATH_PART})*(?::[\w][\w.-]{{0,127}})?$")
# How to find the pins; IMAGE and URL are filled in where the value is known.
DIGEST_HINT = "`docker buildx imagetools inspect {image}` prints it"
SHA256_HINT = "`curl -fsSL {url} | sha256sum` prints it"


class EngineSpec(BaseModel):
    """An engine instance: the recipe, its pinned artifact, and how it is exposed and watched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str = Field(description="launch recipe (k3ops.engines.recipes), e.g. 'vllm-b300x8'")
    image: str | None = Field(None, description="container image tag (default: the recipe's)")
    image_digest: str | None = Field(None, pattern=DIGEST, description="the image's sha256 digest (containers)")
    binary_url: HttpUrl | None = Field(None, description="llama-server archive URL (llama.cpp)")
    binary_sha256: str | None = Field(None, pattern=SHA256, description="the archive's sha256 (llama.cpp)")
    model_file: str | None = Field(
        None, description="llama.cpp: the GGUF (first shard) to load, relative to the revision")
    args: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="flag overrides: a value replaces, true adds, false/null removes")
    environment: dict[str, str] = Field(default_factory=dict, description="extra environment for the engine")
    host: IpAddress = Field("127.0.0.1", description="address the API binds to")
    port: int | None = Field(None, ge=1, le=65535, description="API port (default: the recipe's)")
    api_key_file: ControllerPath | None = Field(
        None, description="controller path of the API key file (needed off loopback)")
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

    @field_validator("image")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and "@" in value:
            raise ValueError(f"{value!r} carries a digest: give the image as registry/repository[:tag] and its "
                             "digest in image_digest")
        if value is not None and not IMAGE_REFERENCE.fullmatch(value):
            raise ValueError(f"{value!r} is not an image reference like 'registry.example.com:5000/team/vllm:tag' "
                             "(optional registry host[:port], lowercase repository, optional tag)")
        return value

    @field_validator("image_digest")
    @classmethod
    def _real_digest(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        found = RECIPES.get(info.data.get("recipe"))
        image = info.data.get("image") or (found.image if found else None) or "IMAGE"
        return not_placeholder(value, f"the image's digest: {DIGEST_HINT.format(image=image)}")

    @field_validator("binary_sha256")
    @classmethod
    def _real_sha256(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        url = info.data.get("binary_url") or "BINARY_URL"
        return not_placeholder(value, f"the archive's sha256: {SHA256_HINT.format(url=url)}")

    @field_validator("model_file")
    @classmethod
    def _in_the_revision(cls, value: str | None) -> str | None:
        return None if value is None else relative_path(value)

    @field_validator("args")
    @classmethod
    def _flags(cls, value: dict) -> dict:
        for flag, argument in value.items():
            if not re.fullmatch(FLAG, flag):
                raise ValueError(f"{flag!r} is not a long flag like '--max-model-len'")
            if isinstance(argument, str):
                plain(argument, flag)
                if argument.startswith("-") and not NUMBER.fullmatch(argument):
                    raise ValueError(f"{flag}: {argument!r} starts with '-', so the engine would read it as a flag "
                                     "of its own; give the flag itself as a key of engine.args")
        return value

    @field_validator("environment")
    @classmethod
    def _variables(cls, value: dict) -> dict:
        """Names a shell and systemd take as variables; values on one line (a newline: a new directive); no
        secret, which would sit in a unit file every user reads."""
        secret = sorted(SECRET_VARIABLES & set(value))
        if secret:
            raise ValueError(f"{secret[0]} is a secret: give the API key in engine.api_key_file (a file on the "
                             "controller), never in data; the engines need no Hub token")
        return environment(value)

    @model_validator(mode="after")
    def _complete(self) -> EngineSpec:
        found = RECIPES[self.recipe]
        if not ipaddress.ip_address(self.host).is_loopback and self.api_key_file is None:
            raise ValueError(f"host: {self.host} is not loopback, so api_key_file is required")
        if self.api_key_file is not None and found.engine == "sglang":
            raise ValueError("api_key_file: SGLang reads its key only from its command line, where `ps` shows it; "
                             "keep SGLang on loopback behind a proxy that checks keys")
        if found.image is not None and self.image_digest is None:
            hint = DIGEST_HINT.format(image=self.image or found.image)
            raise ValueError(f"image_digest: recipe {self.recipe!r} runs a container; pin its image by digest ({hint})")
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
