"""The fabric check's data: the pinned test tools, what they run, what they must reach, and the gate.

`k3ops nccl check` and the deploys read it; thresholds default to the published figures per hardware
profile (k3ops.nccl.thresholds) and a fleet overrides them, or its baseline, in group data.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..forms import ControllerPath, environment

PACKAGE_VERSION = re.compile(r"^(?:\d+:)?[0-9][A-Za-z0-9.+~]*-[A-Za-z0-9.+~]+$")
SETTING_NAME = re.compile(r"^(?:NCCL|RCCL|UCX|HSA|CUDA|NVIDIA|OMPI)_[A-Z0-9_]+$")
INTERFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
GIB = 1024**3

# The tests k3ops runs: all_reduce on one host (tensor parallel inside a node), and across an engine
# cluster's hosts all_reduce (tensor/pipeline traffic) and alltoall (K3's expert-parallel dispatch).
# host_nic_loopback: all_reduce on one host with peer access and shared memory off, so every byte goes out
# through the host's NICs and back (Azure's "IB loopback"): a slow NIC shows without a second host.
TestKind = Literal["host_all_reduce", "cluster_all_reduce", "cluster_alltoall", "host_nic_loopback"]
TEST_KINDS: tuple[TestKind, ...] = ("host_all_reduce", "cluster_all_reduce", "cluster_alltoall",
                                    "host_nic_loopback")


class FabricCheckSpec(BaseModel):
    """How a host's fabric is checked before a model loads, and whether its engine waits for a pass."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    nccl_tests_version: str = Field("2.17.6-1", description="exact nccl-tests package version (NVIDIA; AMD's "
                                                              "rccl-tests follows the ROCm release)")
    nccl_message_gib: float = Field(8, gt=0, le=64, description="message size (GiB) whose bus bandwidth is judged")
    nccl_timeout_seconds: int = Field(600, ge=30, le=7200,
                                      description="a test still running after this long is reported as a hang")
    nccl_thresholds: dict[str, float] = Field(
        default_factory=dict, description="bus bandwidth (GB/s) each test must reach, by test "
                                          f"({', '.join(TEST_KINDS)}); unset: the hardware profile's published figure")
    nccl_baseline: dict[str, float] = Field(
        default_factory=dict, description="the fleet's own healthy figures by test (`k3ops nccl check --baseline` "
                                          "prints them); judged against nccl_baseline_fraction of them")
    nccl_baseline_fraction: float = Field(0.9, gt=0, le=1, description="share of nccl_baseline a test must reach")
    nccl_environment: dict[str, str] = Field(
        default_factory=dict, description="extra NCCL_/RCCL_/UCX_ settings for the tests (e.g. NCCL_IB_HCA)")
    nccl_bootstrap_interface: str | None = Field(
        None, description="network interface MPI and NCCL's bootstrap use between hosts; unset: any but lo and "
                          "docker0")
    nccl_mpi_key: ControllerPath = Field("~/.config/k3ops/nccl_ed25519",
                                    description="controller path of the fleet's MPI launch key (made when missing)")
    nccl_group: str | None = Field(
        None, pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="hosts sharing it are tested together across hosts (spares, burn-in); unset: the engine cluster")
    nccl_gate: Literal["enforce", "off"] = Field(
        "enforce", description="enforce: a multi-node engine starts only after a passing fabric check on its "
                               "current driver; off: start regardless")

    @field_validator("nccl_tests_version")
    @classmethod
    def _package_version(cls, value: str) -> str:
        if not PACKAGE_VERSION.fullmatch(value):
            raise ValueError(f"{value!r} is not a package version like '2.17.6-1'")
        return value

    @field_validator("nccl_thresholds", "nccl_baseline")
    @classmethod
    def _known_tests(cls, value: dict[str, float]) -> dict[str, float]:
        for kind, figure in value.items():
            if kind not in TEST_KINDS:
                raise ValueError(f"{kind!r} is not a test; known: {', '.join(TEST_KINDS)}")
            if figure <= 0:
                raise ValueError(f"{kind}: {figure} GB/s is not a bandwidth (give a positive number)")
        return value

    @field_validator("nccl_environment")
    @classmethod
    def _settings(cls, value: dict[str, str]) -> dict[str, str]:
        """Names of the libraries' own settings, values on one line: they reach mpirun's command line."""
        return environment(value, SETTING_NAME, "an NCCL, RCCL, UCX, HSA, CUDA, NVIDIA or OMPI setting (like "
                                                "'NCCL_IB_HCA')")

    @field_validator("nccl_bootstrap_interface")
    @classmethod
    def _interface(cls, value: str | None) -> str | None:
        if value is not None and not INTERFACE.fullmatch(value):
            raise ValueError(f"{value!r} is not a network interface name like 'eth0' or 'ens6np0'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _group_is_the_cluster(cls, data):
        """An engine cluster's hosts are tested as that cluster, which its gate asks for; a group of their own
        would leave the gate without a result."""
        engine = data.get("engine") if isinstance(data, dict) else None
        cluster = engine.get("cluster") if isinstance(engine, dict) else None
        group = data.get("nccl_group") if isinstance(data, dict) else None
        if cluster and group and group != cluster:
            raise ValueError(f"nccl_group: {group!r} differs from engine.cluster {cluster!r}; an engine cluster's "
                             "hosts are tested as their cluster (remove nccl_group)")
        return data

    @property
    def message_bytes(self) -> int:
        return int(self.nccl_message_gib * GIB)
