"""The whole GPU host: the base, a container runtime, then the vendor's driver stack the host's spec names."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..spec import host_spec
from .base import gpu_host_base
from .container_runtime import container_runtime
from .nvidia import nvidia_gpu_host
from .rocm import amd_gpu_host


@deploy("GPU host")
def gpu_host() -> None:
    spec = host_spec(host)
    gpu_host_base()
    if spec.gpu_vendor is not None:
        container_runtime()
    if spec.gpu_vendor == "nvidia":
        nvidia_gpu_host()
    elif spec.gpu_vendor == "amd":
        amd_gpu_host()
