"""The model cache and the pinned checkpoint: `pyinfra inventory/prod.py deploys/model.py`."""

from k3ops.deploys.model import model

model()
