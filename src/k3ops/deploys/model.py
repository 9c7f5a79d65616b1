"""The model on a host: the NVMe cache volume, then the pinned checkpoint on it."""

from __future__ import annotations

from pyinfra.api import deploy

from .checkpoint import checkpoint
from .model_cache import model_cache


@deploy("Model")
def model() -> None:
    model_cache()
    checkpoint()
