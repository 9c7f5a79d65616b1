"""The model on a host: the NVMe cache volume, then the pinned checkpoint on it."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ..ssh_liveness import watch_connection
from .checkpoint import checkpoint
from .model_cache import model_cache


@deploy("Model")
def model() -> None:
    watch_connection(host)
    model_cache()
    checkpoint()
