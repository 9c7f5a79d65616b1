"""What a simulated tool can see of its host: the hardware document and the driver layers.

Runs on lab hosts under Debian's python3, so it uses the standard library only. Every path is
relative to `root` so that unit tests can point a tool at a directory laid out like a host.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
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
    """View of one lab host, rooted at `root` ("/" on the host itself). Tools only read it, except where
    the real hardware keeps state across their runs (a GPU reset records a row remap in the InfoROM) or
    the boot layer clears transient faults: those write the hardware document back with write_hardware."""

    def __init__(self, root: str | os.PathLike = "/"):
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def hardware(self) -> dict:
        return json.loads(self.path(HARDWARE_DOCUMENT).read_text())

    def write_hardware(self, hardware: dict) -> None:
        """Replace the hardware document atomically (temporary file, then rename), keeping its mode, so
        that a tool reading it at the same time sees the old document or the new one, never a part."""
        document = self.path(HARDWARE_DOCUMENT)
        mode = document.stat().st_mode & 0o7777 if document.exists() else 0o644
        descriptor, temporary = tempfile.mkstemp(dir=document.parent, prefix=f".{document.name}.")
        try:
            with os.fdopen(descriptor, "w") as stream:
                stream.write(json.dumps(hardware, indent=2) + "\n")
            os.chmod(temporary, mode)
            os.replace(temporary, document)
        except BaseException:
            os.unlink(temporary)
            raise

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
        return self.persistenced_running() or self.path(LEGACY_PERSISTENCE_FLAG).exists()

    def persistenced_running(self) -> bool:
        """nvidia-persistenced is up and holds the GPUs open. A daemon killed with SIGKILL leaves its socket
        behind with no listener (connecting is refused): its file handles, and persistence, went with it."""
        path = self.path(PERSISTENCED_SOCKET)
        if not path.is_socket():
            return path.exists()  # a plain file stands for the daemon where none can bind a socket (tests)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.setblocking(False)
            try:
                probe.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                return False
            except OSError:
                pass  # a full accept queue (the daemon never accepts) or a path too long to probe: it is there
        return True

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
