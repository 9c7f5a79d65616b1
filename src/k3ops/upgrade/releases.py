"""What a rollout moves: an NVIDIA driver release (`k3ops upgrade driver`) or a ROCm release with its amdgpu
driver (`k3ops upgrade rocm`). The state machine, its steps and the budget are the same for both; what differs by
vendor (the setting, the deploy that stages the release, what a host runs, the host checks, the diagnostic) is
here, one class each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..deploys.nvidia import release_package_version
from ..deploys.nvlink import fabric_manager_package
from ..deploys.rocm import rocm_pins
from ..facts.amd import AmdgpuModule, RocmVersion, amdgpu_release
from ..facts.apt import AptHeldPackages, AptPolicyVersion
from ..facts.gpu_health import DcgmDiag, diag_failures
from ..facts.nvidia import NvidiaKernelModule, NvSwitches
from ..settings import host_settings, settings_of
from ..settings.host import DRIVER_VERSION, ROCM_RELEASE, GpuHostSpec
from ..vendor_units import DCGM, FABRIC_MANAGER, PERSISTENCED
from .versions import published_versions


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

    def data(self, to: str) -> dict:
        """The data laid over the inventory's for a host moving to `to`."""
        return {self.setting: to}

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


NVIDIA_DRIVER = NvidiaDriver(
    kind="driver", vendor="nvidia", vendor_name="NVIDIA", label="NVIDIA driver", setting="nvidia_driver_version",
    form=DRIVER_VERSION, example="an exact driver version like '580.126.09'",
    stage_deploy="k3ops.deploys.nvidia.staged_driver", host_checks_module="test_nvidia.py",
    gpu_services=tuple(f"{unit}.service" for unit in (DCGM, PERSISTENCED, FABRIC_MANAGER)))
ROCM = RocmRelease(
    kind="rocm", vendor="amd", vendor_name="AMD", label="ROCm", setting="rocm_release", form=ROCM_RELEASE,
    example="a ROCm release like '7.0.2'", stage_deploy="k3ops.deploys.rocm.staged_release",
    host_checks_module="test_rocm.py", gpu_services=())
RELEASES = {release.kind: release for release in (NVIDIA_DRIVER, ROCM)}


def of(record: dict) -> Release:
    """The release a rollout's record moves to."""
    return RELEASES[record["release"]]
