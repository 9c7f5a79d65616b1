"""What a rollout moves: an NVIDIA driver release (`k3ops upgrade driver`), a ROCm release with its amdgpu
driver (`k3ops upgrade rocm`), or the model's revision (`k3ops upgrade model`). The state machine, its steps and
the budget are the same for all; what differs (the setting, the deploys that stage and switch the release, what a
host runs, the host checks, the diagnostic, whether it reboots) is here, one class each.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from ..deploys.nvidia import release_package_version
from ..deploys.nvlink import fabric_manager_package
from ..deploys.rocm import rocm_pins
from ..engines.units import engine_urls
from ..facts.amd import AmdgpuModule, RocmVersion, amdgpu_release
from ..facts.apt import AptHeldPackages, AptPolicyVersion
from ..facts.checkpoint import ModelCheckpoints
from ..facts.engine import EngineState
from ..facts.gpu_health import DcgmDiag, diag_failures
from ..facts.nvidia import NvidiaKernelModule, NvSwitches
from ..settings import host_settings, settings_of
from ..settings.host import DRIVER_VERSION, ROCM_RELEASE, GpuHostSpec
from ..settings.model import COMMIT_SHA
from ..vendor_units import AMD_METRICS_EXPORTER, DCGM, FABRIC_MANAGER, GPU_AGENT, PERSISTENCED
from . import data_change
from .versions import published_versions

GPU_HOST_DEPLOY = "k3ops.deploys.gpu_host.gpu_host"


@dataclass(frozen=True)
class Release:
    """One kind of release a rollout moves hosts to."""

    kind: str  # the `k3ops upgrade` verb, and the record's `release`
    vendor: str  # the gpu_vendor of the hosts it moves
    vendor_name: str  # as people write it
    label: str  # how the release is named to people: "NVIDIA driver 580.126.09"
    setting: str  # the inventory's field that says the release
    form: re.Pattern
    example: str
    stage_deploy: str  # the packaged deploy that downloads the release on a serving host
    host_checks_module: str  # the release's host checks (tests/hosts)
    gpu_services: tuple[str, ...]  # units that hold the GPUs open, stopped before the driver changes
    switch_deploy: str = GPU_HOST_DEPLOY  # the packaged deploy that moves a drained group to the release
    reboots: bool = True  # a host moves to the release through a reboot
    checks_fabric: bool = True  # the group's validation runs the fabric check
    stages_fleet: bool = False  # staged on every host of the rollout at its start (else batch by batch)
    always_rolls_back_canary: bool = False  # a failed canary goes back even where data does not ask it
    model: dict | None = None  # the model whose revision moves, as the inventory gives it (revision aside)

    def data(self, to: str) -> dict:
        """The data laid over the inventory's for a host moving to `to`."""
        return {self.setting: to}

    def not_moved(self, data: dict) -> str | None:
        """Why a selected host is not in the rollout (None: it is)."""
        vendor = settings_of(data).gpu.gpu_vendor
        return None if vendor == self.vendor else f"no {self.vendor_name} GPUs"

    def for_hosts(self, data: list[dict]) -> Release:
        """This release, bound to what the rollout's hosts (their data, one or more) have in common."""
        return self

    def bound(self, record: dict) -> Release:
        """This release as a rollout's record bound it."""
        return self

    def data_change(self, inventory: str, to: str, ran: set[str], write: bool) -> list[str]:
        """The edit that makes the inventory's data say `to` (`ran`: what the hosts ran before), or with `write`
        the edit made."""
        return data_change.change(inventory, self.setting, to, ran, write)

    def refused(self, to: str) -> str | None:
        return None if self.form.fullmatch(to) else f"--to: {to!r} is not {self.example}"

    def running(self, remote) -> str | None:
        """The release of the driver the host's kernel runs (None: none loaded, or not one release's)."""
        raise NotImplementedError

    def current(self, remote, spec: GpuHostSpec, wanted: str) -> bool:
        """Whether the host runs `wanted` already: loaded, and every package that moves with it installed at the
        release and held."""
        raise NotImplementedError

    def published(self, spec: GpuHostSpec) -> list[tuple[str, str, str]]:
        """(repository, package, version pattern) that must be listed for the spec's release to install."""
        raise NotImplementedError

    def diagnosed(self, remote, data: dict) -> list[str]:
        """What the vendor's quick diagnostic finds failing on the host (none where it has none)."""
        return []

    def unpublished(self, hosts: list, to: str) -> list[str]:
        """Hosts whose repositories do not list the release (each index read once)."""
        problems, listed = [], {}
        for host in hosts:
            spec = host_settings(host).gpu
            for name, package, pattern in self.published(spec):
                repository = spec.repository(name)
                key = (repository.url, package)
                if key not in listed:
                    try:
                        listed[key] = published_versions(repository, package)
                    except ValueError as error:
                        listed[key] = error
                found = listed[key]
                if isinstance(found, ValueError):
                    problems.append(f"{host.name}: --to {to}: {found}")
                elif not any(fnmatchcase(version, pattern) for version in found):
                    near = sorted(version for version in found if version.startswith(to.split(".")[0] + "."))
                    problems.append(f"{host.name}: --to {to}: {repository.url} has no {package} {pattern} (its "
                                    f"{to.split('.')[0]} releases: {', '.join(near) or 'none'})")
        return problems


class NvidiaDriver(Release):
    def running(self, remote) -> str | None:
        return (remote.get_fact(NvidiaKernelModule) or {}).get("version")

    def current(self, remote, spec: GpuHostSpec, wanted: str) -> bool:
        """The driver and the fabric manager it needs (which moves with the driver)."""
        moving = ["nvidia-driver"]
        if spec.fabric_manager_wanted(bool(remote.get_fact(NvSwitches))):
            moving.append(fabric_manager_package(spec))
        held = remote.get_fact(AptHeldPackages)
        return self.running(remote) == wanted and all(
            remote.get_fact(AptPolicyVersion, package=package)["installed"] == release_package_version(wanted)
            and package in held for package in moving)

    def published(self, spec: GpuHostSpec) -> list[tuple[str, str, str]]:
        return [("cuda", "nvidia-driver", release_package_version(spec.nvidia_driver_version))]

    def diagnosed(self, remote, data: dict) -> list[str]:
        """DCGM's quick diagnostic (`dcgmi diag -r 1`: the driver, NVML, persistence, pending row remaps, ...), on a
        host that has DCGM."""
        if not settings_of(data).gpu.dcgm:
            return []
        found = remote.get_fact(DcgmDiag)
        return ["dcgmi is not installed"] if found is None else diag_failures(found)


class RocmRelease(Release):
    def running(self, remote) -> str | None:
        return amdgpu_release(remote.get_fact(AmdgpuModule),
                              remote.get_fact(AptPolicyVersion, package="amdgpu-dkms")["installed"])

    def current(self, remote, spec: GpuHostSpec, wanted: str) -> bool:
        """amdgpu of the release loaded and held, and ROCm's userspace of the release installed."""
        return self.running(remote) == wanted and "amdgpu-dkms" in remote.get_fact(AptHeldPackages) and \
            (remote.get_fact(RocmVersion) or "").startswith(f"{wanted}-")

    def published(self, spec: GpuHostSpec) -> list[tuple[str, str, str]]:
        amdgpu, rocm = (version for _, version in rocm_pins(spec))
        return [("amdgpu", "amdgpu-dkms", amdgpu), ("rocm", "rocm", rocm)]


class ModelRevision(Release):
    """The revision of the model the hosts serve: staged on every host first, then switched a group at a time with
    an engine restart, no reboot."""

    def data(self, to: str) -> dict:
        return {self.setting: {**self.model, "revision": to}}

    def not_moved(self, data: dict) -> str | None:
        settings = settings_of(data)
        return None if settings.model.model is not None and settings.engine.engine is not None else \
            "serves no model"

    def for_hosts(self, data: list[dict]) -> Release:
        """Bound to the one model the hosts serve (as validated, revision aside): a rollout moves one model."""
        models = {}
        for each in data:
            model = settings_of(each).model.model.model_dump(mode="json", exclude={"revision"})
            models[json.dumps(model, sort_keys=True)] = model
        if len(models) != 1:
            raise ValueError(f"the selected hosts serve {len(models)} different models ("
                             + "; ".join(f"{model['repo_id']} as {model['name']}" for model in models.values())
                             + "): --limit the rollout to one model's hosts")
        return replace(self, model=next(iter(models.values())))

    def bound(self, record: dict) -> Release:
        return replace(self, model=record["model"])

    def data_change(self, inventory: str, to: str, ran: set[str], write: bool) -> list[str]:
        return data_change.revision_change(inventory, to, ran, write)

    def running(self, remote) -> str | None:
        """The revision the engine loaded at its last start (its unit records it), whether it runs now or not."""
        loaded = remote.get_fact(EngineState, **state_urls(remote.data))["revision"]
        return PurePosixPath(loaded).name if loaded else None

    def current(self, remote, spec: GpuHostSpec, wanted: str) -> bool:
        """The revision active in the cache and loaded by the engine."""
        model = settings_of(remote.data).model
        stored = remote.get_fact(ModelCheckpoints, cache_path=model.model_cache_path).get(model.model.name, {})
        return stored.get("active") == wanted and self.running(remote) == wanted

    def published(self, spec: GpuHostSpec) -> list[tuple[str, str, str]]:
        return []  # the Hub is asked by each host's staging, which fails while the fleet still serves


def state_urls(data: dict) -> dict:
    """The EngineState fact's arguments for a host's engine (its health and models URLs, the served name)."""
    urls = engine_urls(settings_of(data).engine.engine)
    return {"health_url": urls["health_url"], "models_url": urls["models_url"],
            "served_name": settings_of(data).model.model.name}


NVIDIA_DRIVER = NvidiaDriver(
    kind="driver", vendor="nvidia", vendor_name="NVIDIA", label="NVIDIA driver", setting="nvidia_driver_version",
    form=DRIVER_VERSION, example="an exact driver version like '580.126.09'",
    stage_deploy="k3ops.deploys.nvidia.staged_driver", host_checks_module="test_nvidia.py",
    gpu_services=tuple(f"{unit}.service" for unit in (DCGM, PERSISTENCED, FABRIC_MANAGER)))
ROCM = RocmRelease(
    kind="rocm", vendor="amd", vendor_name="AMD", label="ROCm", setting="rocm_release", form=ROCM_RELEASE,
    example="a ROCm release like '7.0.2'", stage_deploy="k3ops.deploys.rocm.staged_release",
    # AMD's metrics exporter and gpuagent hold the GPUs: AMD stops them before a driver unload or upgrade
    host_checks_module="test_rocm.py",
    gpu_services=tuple(f"{unit}.service" for unit in (AMD_METRICS_EXPORTER, GPU_AGENT)))
MODEL_REVISION = ModelRevision(
    kind="model", vendor="any", vendor_name="serving", label="model revision", setting="model", form=COMMIT_SHA,
    example="a full 40-hex commit sha of the model's repository",
    stage_deploy="k3ops.deploys.checkpoint.staged_checkpoint", host_checks_module="test_model.py", gpu_services=(),
    switch_deploy="k3ops.deploys.k3.new_revision", reboots=False, checks_fabric=False, stages_fleet=True,
    always_rolls_back_canary=True)
RELEASES = {release.kind: release for release in (NVIDIA_DRIVER, ROCM, MODEL_REVISION)}


def of(record: dict) -> Release:
    """The release a rollout's record moves to."""
    return RELEASES[record["release"]].bound(record)
