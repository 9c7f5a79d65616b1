"""The whole GPU host: the base, a container runtime, the vendor's driver stack the host's spec names, then
the tools that check its fabric."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..settings import host_settings
from ..ssh_liveness import watched
from .base import base
from .container_runtime import container_runtime
from .nccl_tests import nccl_tests
from .nvidia import nvidia
from .rocm import rocm
from .uploads import staged_privately


@watched
@staged_privately
@deploy("GPU host")
def gpu_host() -> None:
    spec = host_settings(host).gpu
    base()
    if spec.gpu_vendor is not None:
        container_runtime()
    if spec.gpu_vendor == "nvidia":
        nvidia()
    elif spec.gpu_vendor == "amd":
        rocm()
    nccl_tests()
