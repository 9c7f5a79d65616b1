"""The model on a host: the NVMe cache volume, then the pinned checkpoint on it."""

from __future__ import annotations

from pyinfra.api import deploy

from ..ssh_liveness import watched
from .checkpoint import checkpoint
from .model_cache import model_cache
from .uploads import private_staging


@watched
@deploy("Model")
def model() -> None:
    private_staging()
    model_cache()
    checkpoint()
