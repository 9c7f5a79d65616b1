"""What every GPU host needs before a driver: time sync, kernel headers for DKMS, unattended-upgrades
kept off the GPU stack, and the kernel tunables the GPU vendors' tuning guides ask for.

DKMS builds the GPU driver for each kernel whose headers are installed, so every installed kernel gets
its headers, and each kernel flavour's headers metapackage brings the headers of the next kernel with
it: a host that boots a kernel upgraded by apt still has its GPU driver.
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.facts.server import KernelVersion
from pyinfra.operations import server

from ..facts.kernel import InstalledKernels
from ..facts.memo import remembered
from ..operations import owned_files, packages, units
from ..vendor_units import TIME_SYNC
from . import rendered

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
def base(sources: list) -> None:
    """sources: the operations that add the host's vendor apt sources and pins (added before this)."""
    packages.update(name="Refresh apt lists older than an hour or whose sources changed", cache_time=3600,
                    sources=sources)
    owned_files.config_file(name="Keep unattended-upgrades away from the GPU stack", path=UNATTENDED_UPGRADES_BLACKLIST,
                            content=rendered("apt/unattended-upgrades-blacklist.j2", patterns=GPU_STACK_PACKAGES))
    packages.installed(name="Install time sync and the tools GPU checks read",
                       packages=["systemd-timesyncd", "pciutils", "mokutil"])
    units.service(name="Time sync running and enabled", unit=TIME_SYNC, running=True, enabled=True)
    packages.installed(name="Install kernel headers for every installed kernel and kernel flavour",
                       packages=kernel_headers(remembered(KernelVersion), remembered(InstalledKernels)))
    owned_files.config_file(name=f"Keep {', '.join(GPU_SYSCTLS)} at every boot", path=SYSCTL_FILE,
                            content="".join(f"{key} = {value}\n" for key, value in GPU_SYSCTLS.items()))
    for key, value in GPU_SYSCTLS.items():
        server.sysctl(name=f"Set {key} = {value}", key=key, value=value)
