"""What every GPU host needs before a driver: time sync, and unattended-upgrades kept off the GPU stack."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, files, systemd

from . import TEMPLATES

UNATTENDED_UPGRADES_BLACKLIST = "/etc/apt/apt.conf.d/51k3ops-gpu-stack-blacklist"
# Package name patterns (regular expressions) that unattended-upgrades must never move: a partial
# upgrade of any of them breaks the running driver stack.
GPU_STACK_PACKAGES = (
    "nvidia-", "libnvidia-", "cuda-", "libcuda", "libnccl", "nccl-", "datacenter-gpu-manager",
    "amdgpu-", "rocm", "amd-smi", "hip-", "rccl",
)


@deploy("GPU host base")
def gpu_host_base() -> None:
    files.template(
        name="Keep unattended-upgrades away from the GPU stack",
        src=str(TEMPLATES / "apt" / "unattended-upgrades-blacklist.j2"),
        dest=UNATTENDED_UPGRADES_BLACKLIST, mode="644", patterns=GPU_STACK_PACKAGES,
    )
    apt.packages(name="Install time sync and the tools GPU checks read", packages=["systemd-timesyncd", "pciutils"],
                 no_recommends=True)
    # Enabled, so it runs from the next boot; containers (the lab) skip it by its own condition.
    systemd.service(name="Enable time sync", service="systemd-timesyncd", running=None, enabled=True)
