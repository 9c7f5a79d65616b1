"""The whole GPU host: the vendors' apt sources, the base, a container runtime, the vendor's driver stack the
host's spec names, the tools that check its fabric, then the exporters that watch it.

Every vendor source and pin goes in first, so that apt's lists are refreshed once: each refresh reads every list
again (13-16 s on a slow host), and a first deploy used to refresh once per vendor."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import KernelVersion

from ..facts.amd import AmdgpuModule
from ..facts.apt import AptPolicyVersion
from ..facts.boot import KernelCommandLine, SecureBoot
from ..facts.kernel import InstalledKernels, KernelModuleLoaded
from ..facts.memo import read_together
from ..facts.network import RdmaNics
from ..facts.nvidia import NvidiaKernelModule, NvSwitches
from ..settings import host_settings
from ..ssh_liveness import watched
from .base import base
from .container_runtime import container_runtime, docker_sources
from .gpudirect import PEERMEM_MODULE
from .monitoring import amd_metrics_exporter_sources, monitoring
from .nccl_tests import doca_sources, nccl_tests
from .nvidia import nvidia, nvidia_sources
from .rocm import rocm, rocm_sources
from .uploads import staged_privately

# What the parts below ask of a host before any operation runs, beyond the kernel facts base asks of every host,
# by the host's GPU vendor: asked together, in one command.
ASKED_FIRST = {
    None: (),
    "nvidia": (RdmaNics, SecureBoot, NvSwitches, NvidiaKernelModule, (KernelModuleLoaded, {"module": PEERMEM_MODULE})),
    "amd": (RdmaNics, SecureBoot, AmdgpuModule, KernelCommandLine, (AptPolicyVersion, {"package": "amdgpu-dkms"})),
}


@watched
@staged_privately
@deploy("GPU host")
def gpu_host() -> None:
    spec = host_settings(host).gpu
    read_together(KernelVersion, InstalledKernels, *ASKED_FIRST[spec.gpu_vendor])  # base asks these of every host
    driver_sources = {"nvidia": nvidia_sources, "amd": rocm_sources}[spec.gpu_vendor](spec) if spec.gpu_vendor else []
    sources = [*(docker_sources(spec) if spec.gpu_vendor else []), *driver_sources, *doca_sources(spec),
               *amd_metrics_exporter_sources(spec)]
    base(sources)
    if spec.gpu_vendor is not None:
        container_runtime()
    if spec.gpu_vendor == "nvidia":
        nvidia()
    elif spec.gpu_vendor == "amd":
        rocm(driver_sources)
    nccl_tests()
    monitoring()
