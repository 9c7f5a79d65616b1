"""Docker Engine, from Debian or from Docker's own repository: the runtime the engine units use."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..operations import packages, units
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from ..vendor_units import DOCKER
from .repositories import signed_repository

# apparmor is only a Recommends of both, but Debian's kernel enables AppArmor, and there dockerd refuses to start
# any container without apparmor_parser to load its docker-default profile (seen on the lab's VM hosts).
DOCKER_PACKAGES = {"distribution": ["docker.io", "apparmor"],
                   "vendor": ["docker-ce", "docker-ce-cli", "containerd.io", "apparmor"]}


def docker_sources(spec: GpuHostSpec) -> list:
    """Docker's repository, where the spec takes Docker from it."""
    return signed_repository("docker", spec.repository("docker")) if spec.docker_source == "vendor" else []


@deploy("Container runtime")
def container_runtime() -> None:
    spec = host_settings(host).gpu
    packages.installed(name=f"Install Docker Engine ({spec.docker_source})",
                       packages=DOCKER_PACKAGES[spec.docker_source])
    units.service(name="Run Docker", unit=DOCKER, running=True, enabled=True)
