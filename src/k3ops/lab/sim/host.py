"""What a simulated tool can see of its host: the hardware document and the driver layers.

Runs on lab hosts under Debian's python3, so it uses the standard library only. Every path is
relative to `root` so that unit tests can point a tool at a directory laid out like a host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HARDWARE_DOCUMENT = "etc/k3ops-lab/hardware.json"
# The userspace driver version is the one the NVML library carries, as on a real host.
NVML_LIBRARY = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
NVML_PREFIX = "libnvidia-ml.so."
# Written by the lab's boot layer when it "loads" a kernel module (see boot.py).
NVIDIA_MODULE_VERSION = "sys/module/nvidia/version"
AMDGPU_MODULE_VERSION = "sys/module/amdgpu/version"
# What a driver package installs for the boot layer to load at the next boot.
KERNEL_MODULE_STAGING = "usr/lib/k3ops-lab-sim/kmod"
ROCM_VERSION_FILE = "opt/rocm/.info/version"
PERSISTENCED_SOCKET = "run/nvidia-persistenced/socket"
# `nvidia-smi -pm 1` without the daemon: the driver's legacy persistence mode, gone at the next boot like /run.
LEGACY_PERSISTENCE_FLAG = "run/k3ops-lab-sim/nvidia-legacy-persistence"
# Each simulated package records its own version here, as its real binaries carry theirs.
PACKAGE_VERSIONS = "usr/lib/k3ops-lab-sim/versions"

CUDA_VERSION_BY_BRANCH = {"550": "12.4", "565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0", "590": "13.1"}


class SimHost:
    """Read-only view of one lab host, rooted at `root` ("/" on the host itself)."""

    def __init__(self, root: str | os.PathLike = "/"):
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def hardware(self) -> dict:
        return json.loads(self.path(HARDWARE_DOCUMENT).read_text())

    def nvidia_userspace_version(self) -> str | None:
        """The installed driver's version, from the NVML library's real file name."""
        library = self.path(NVML_LIBRARY)
        if not library.exists():
            return None
        name = Path(os.readlink(library)).name if library.is_symlink() else library.name
        return name[len(NVML_PREFIX):] if name.startswith(NVML_PREFIX) else None

    def nvidia_module_version(self) -> str | None:
        """The loaded kernel module's version, None when no module is loaded."""
        return _read_stripped(self.path(NVIDIA_MODULE_VERSION))

    def amdgpu_module_version(self) -> str | None:
        return _read_stripped(self.path(AMDGPU_MODULE_VERSION))

    def rocm_version(self) -> str | None:
        return _read_stripped(self.path(ROCM_VERSION_FILE))

    def package_version(self, package: str) -> str | None:
        """The version of an installed simulated package (nvidia-container-toolkit, rocm-smi-lib, ...)."""
        return _read_stripped(self.path(f"{PACKAGE_VERSIONS}/{package}"))

    def persistence_mode(self) -> bool:
        return self.path(PERSISTENCED_SOCKET).exists() or self.path(LEGACY_PERSISTENCE_FLAG).exists()

    def visible_gpus(self) -> list[dict]:
        """GPUs the driver can reach: a GPU marked fallen off the bus is gone from every tool."""
        return [gpu for gpu in self.hardware()["gpus"] if not gpu.get("fallen_off_bus")]


def cuda_version(driver_version: str) -> str:
    """The CUDA version a driver branch supports, as nvidia-smi prints it."""
    return CUDA_VERSION_BY_BRANCH.get(driver_version.split(".")[0], "13.0")


def _read_stripped(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None
