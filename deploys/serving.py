"""The engine alone, on hosts that already have their GPU stack and model: `pyinfra INVENTORY deploys/serving.py`."""

from k3ops.deploys.serving import serving

serving()
