"""Provision GPU hosts: `pyinfra inventory/prod.py deploys/gpu_host.py`."""

from k3ops.deploys.gpu_host import gpu_host

gpu_host()
