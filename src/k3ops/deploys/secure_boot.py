"""Secure Boot and the GPU drivers' kernel modules, which DKMS builds on the host unsigned."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from ..facts.boot import SecureBoot
from ..facts.memo import remembered
from ..settings.host import GpuHostSpec

VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD (amdgpu)"}


def refuse_unsigned_modules(spec: GpuHostSpec) -> None:
    """Stop before anything is installed: with Secure Boot on, the kernel would refuse the modules and
    the failure would show only after the reboot. The fact reads the firmware variable, so it holds on
    a fresh host too."""
    if remembered(SecureBoot) and not spec.signed_kernel_modules:
        raise DeployError(f"{host.name}: Secure Boot is on and would refuse unsigned {VENDOR_NAMES[spec.gpu_vendor]} "
                          "modules; enroll a MOK that signs DKMS modules and set signed_kernel_modules = True, "
                          "or turn Secure Boot off")
