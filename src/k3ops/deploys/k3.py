"""Kimi K3 on a host, the whole stack in order: the GPU host, the model, then the engine serving it."""

from __future__ import annotations

from pyinfra.api import deploy

from ..ssh_liveness import watched
from .gpu_host import gpu_host
from .model import model
from .serving import serving
from .uploads import staged_privately


@watched
@staged_privately
@deploy("Kimi K3")
def k3() -> None:
    gpu_host()
    model()
    serving()
