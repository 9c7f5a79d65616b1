"""What every GPU host needs before a driver: time sync, kernel headers for DKMS, unattended-upgrades
kept off the GPU stack, and the kernel tunables the GPU vendors' tuning guides ask for.

DKMS builds the GPU driver for each kernel whose headers are installed, so every installed kernel gets
its headers, and each kernel flavour's headers metapackage brings the headers of the next kernel with
it: a host that boots a kernel upgraded by apt still has its GPU driver.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import KernelVersion
from pyinfra.operations import apt, files, server, systemd

from ..facts.kernel import InstalledKernels
from ..operations import packages
from . import TEMPLATES

UNATTENDED_UPGRADES_BLACKLIST = "/etc/apt/apt.conf.d/51k3ops-gpu-stack-blacklist"
# Package name patterns (regular expressions) that unattended-upgrades must never move: a partial
# upgrade of any of them breaks the running driver stack.
GPU_STACK_PACKAGES = (
    "nvidia-", "libnvidia-", "cuda-", "libcuda", "libnccl", "nccl-", "datacenter-gpu-manager",
    "amdgpu-", "rocm", "amd-smi", "hip-", "rccl", "nvlsm",
)
SYSCTL_FILE = "/etc/sysctl.d/90-k3ops-gpu.conf"
# Automatic NUMA balancing migrates pages under running GPU jobs; AMD's and NVIDIA's tuning guides turn it off.
GPU_SYSCTLS = {"kernel.numa_balancing": 0}


def kernel_headers(running: str, installed: dict[str, list[str]]) -> list[str]:
    """Headers for the running kernel, each installed one, and each installed flavour's metapackage."""
    releases = sorted({running, *installed["releases"]})
    return [f"linux-headers-{name}" for name in (*releases, *installed["flavours"])]


@deploy("GPU host base")
def base(sources_change: bool) -> None:
    """sources_change: the host's vendor apt sources or pins change in this deploy (added before this)."""
    packages.update(name="Refresh apt lists older than an hour or whose sources changed", cache_time=3600,
                    sources_change=sources_change)
    files.template(
        name="Keep unattended-upgrades away from the GPU stack",
        src=str(TEMPLATES / "apt" / "unattended-upgrades-blacklist.j2"),
        dest=UNATTENDED_UPGRADES_BLACKLIST, mode="644", patterns=GPU_STACK_PACKAGES,
    )
    apt.packages(name="Install time sync and the tools GPU checks read",
                 packages=["systemd-timesyncd", "pciutils", "mokutil"], no_recommends=True)
    systemd.service(name="Time sync running and enabled", service="systemd-timesyncd", running=True, enabled=True)
    apt.packages(name="Install kernel headers for every installed kernel and kernel flavour",
                 packages=kernel_headers(host.get_fact(KernelVersion), host.get_fact(InstalledKernels)),
                 no_recommends=True)
    for key, value in GPU_SYSCTLS.items():
        server.sysctl(name=f"Set {key} = {value}", key=key, value=value, persist=True, persist_file=SYSCTL_FILE)
