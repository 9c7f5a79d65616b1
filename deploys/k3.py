"""Kimi K3, the whole stack: `pyinfra inventory/prod.py deploys/k3.py` (GPU host, model, engine)."""

from k3ops.deploys.k3 import k3

k3()
