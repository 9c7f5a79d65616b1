"""The model on a host: the NVMe cache volume, then the pinned checkpoint on it."""

from __future__ import annotations

from pyinfra.api import deploy

from ..ssh_liveness import watched
from .checkpoint import checkpoint
from .model_cache import model_cache
from .uploads import staged_privately


@watched
@staged_privately
@deploy("Model")
def model() -> None:
    model_cache()
    checkpoint()
