"""The whole GPU host: the base, then the vendor's driver stack the host's spec names."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..spec import host_spec
from .base import gpu_host_base
from .nvidia import nvidia_gpu_host


@deploy("GPU host")
def gpu_host() -> None:
    spec = host_spec(host)
    gpu_host_base()
    if spec.gpu_vendor == "nvidia":
        nvidia_gpu_host()
