"""How a GPU driver's loaded kernel module compares with what is installed: one rule for the controller's facts
and for the host's own metrics (standard library only)."""

from __future__ import annotations

import re

NVML_LIBRARY_REGEX = r"/libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$"


def nvml_version(library_path: str) -> str | None:
    """The driver release of an NVML library, from its resolved file name (libnvidia-ml.so.580.105.08)."""
    found = re.search(NVML_LIBRARY_REGEX, library_path.strip())
    return found.group(1) if found else None


def amdgpu_differs(loaded: str | None, installed: str | None) -> bool:
    """Whether a loaded amdgpu module (AmdgpuModule) is another build than the amdgpu-dkms package installed
    (AptPolicyVersion): package 1:6.14.14.70002-2187269 carries module 6.14.14. Until the host reboots, ROCm's
    userspace and its kernel driver differ."""
    return bool(loaded and installed) and not installed.split(":")[-1].startswith(loaded + ".")
