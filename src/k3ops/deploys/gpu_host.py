"""The whole GPU host: the vendors' apt sources, the base, a container runtime, the vendor's driver stack the
host's spec names, then the tools that check its fabric.

Every vendor source and pin goes in first, so that apt's lists are refreshed once: each refresh reads every list
again (13-16 s on a slow host), and a first deploy used to refresh once per vendor."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..settings import host_settings
from ..ssh_liveness import watched
from .base import base
from .container_runtime import container_runtime, docker_sources
from .nccl_tests import doca_sources, nccl_tests
from .nvidia import nvidia, nvidia_sources
from .rocm import rocm, rocm_sources
from .uploads import staged_privately


@watched
@staged_privately
@deploy("GPU host")
def gpu_host() -> None:
    spec = host_settings(host).gpu
    driver_sources = {"nvidia": nvidia_sources, "amd": rocm_sources}[spec.gpu_vendor](spec) if spec.gpu_vendor else []
    sources = [*(docker_sources(spec) if spec.gpu_vendor else []), *driver_sources, *doca_sources(spec)]
    base(sources_change=any(operation.will_change for operation in sources))
    if spec.gpu_vendor is not None:
        container_runtime()
    if spec.gpu_vendor == "nvidia":
        nvidia()
    elif spec.gpu_vendor == "amd":
        rocm(driver_sources)
    nccl_tests()
