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


@watched
@staged_privately
@deploy("Kimi K3 at a new model revision")
def new_revision() -> None:
    """A model rollout's switch on a drained group: the revision its staging left made active, and the engine's
    unit and image as the data says (a recipe or digest that moves with the revision); the GPU host is left as it
    is, and the engine stopped (the group's maintenance marker): the rollout's validation starts it."""
    model()
    serving()
