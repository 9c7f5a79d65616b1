"""AMD GPU host: one exact ROCm release with its amdgpu driver held, GPU access for the service
user, and the kernel arguments AMD's Instinct system optimization guides ask for (MI300X, MI355X):
the IOMMU in pass-through mode and no PCI resource reallocation."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, deploy
from pyinfra.operations import server
from pyinfra.operations.util import any_changed

from ..facts.amd import AmdgpuModule, amdgpu_differs
from ..facts.apt import AptPolicyVersion
from ..facts.boot import KernelCommandLine
from ..facts.memo import remembered
from ..hardware import AMD_KERNEL_ARGUMENTS
from ..operations import kernel, owned_files, packages
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from . import rendered
from .reboot import reboot_if_needed
from .secure_boot import refuse_unsigned_modules
from .users import system_user
from .repositories import signed_repository

PIN_FILE = "/etc/apt/preferences.d/k3ops-rocm"
ROCM_PACKAGES = ["amdgpu-dkms", "rocm"]
# The IOMMU in pass-through mode, so GPU peer traffic skips translation; the firmware's PCI resource
# layout kept (no reallocation), which the GPUs' large BARs rely on. ROCm's validation suite checks both.
def release_number(release: str) -> str:
    """AMD's packages carry the release as a number: 7.0.2 -> 70002, 6.4.1 -> 60401."""
    major, minor, patch = (int(part) for part in release.split("."))
    return f"{major * 10000 + minor * 100 + patch}"


def rocm_pins(spec: GpuHostSpec) -> list[tuple[str, str]]:
    """(package pattern, version glob) pairs that hold every ROCm package to the one release."""
    return [("amdgpu-dkms amdgpu-dkms-firmware", f"1:*.{release_number(spec.rocm_release)}-*"),
            ("rocm rocm-* amd-smi-lib hip-* rccl*", f"{spec.rocm_release}.*")]


def rocm_sources(spec: GpuHostSpec) -> list:
    """The amdgpu and ROCm repositories of the spec's release, and the pin that holds every package to it."""
    pin = owned_files.config_file(
        name=f"Pin ROCm to release {spec.rocm_release}", path=PIN_FILE,
        content=rendered("apt/rocm-pin.pref.j2", pins=rocm_pins(spec), release=spec.rocm_release))
    return [*signed_repository("amdgpu", spec.repository("amdgpu")),
            *signed_repository("rocm", spec.repository("rocm")), pin]


@deploy("AMD GPU host")
def rocm(sources: list) -> None:
    """sources: the operations of rocm_sources, run before this: a new release moves what is installed."""
    spec = host_settings(host).gpu
    refuse_unsigned_modules(spec)
    installed = packages.installed(name=f"Install amdgpu-dkms and ROCm {spec.rocm_release}", packages=ROCM_PACKAGES,
                                   extra_install_args="--allow-change-held-packages")
    moved = server.shell(
        name=f"Move installed ROCm packages to release {spec.rocm_release}",
        commands=[StringCommand("DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--allow-downgrades",
                                "--allow-change-held-packages", *(QuoteString(name) for name in ROCM_PACKAGES))],
        _if=lambda: any_changed(*sources)() and not installed.did_change(),
    )
    packages.held(name="Hold the amdgpu driver", packages=["amdgpu-dkms"])
    for group in ("render", "video"):  # udev makes them on most hosts; a minimal image may lack render
        server.group(name=f"Ensure the {group} group", group=group, system=True)
    system_user(spec.service_user, "Service user with the GPUs (render, video):", groups=["render", "video"])
    arguments = kernel.boot_arguments(name=f"Kernel arguments {' '.join(AMD_KERNEL_ARGUMENTS)}",
                                      arguments=list(AMD_KERNEL_ARGUMENTS))

    loaded, booted_with = remembered(AmdgpuModule), set(remembered(KernelCommandLine))
    # A driver installed by a run that did not get to its reboot (killed, or a reboot refused) is loaded by this one.
    on_disk = remembered(AptPolicyVersion, package="amdgpu-dkms")["installed"]
    reboot_if_needed(
        spec, reason=f"load amdgpu for ROCm {spec.rocm_release} and apply {' '.join(AMD_KERNEL_ARGUMENTS)}",
        needed=lambda: installed.did_change() or moved.did_change() or arguments.did_change() or loaded is None
        or amdgpu_differs(loaded, on_disk) or not booted_with >= set(AMD_KERNEL_ARGUMENTS),
        verify=" && ".join(["test -c /dev/kfd", *(f"grep -qw {argument} /proc/cmdline" for argument in AMD_KERNEL_ARGUMENTS)]),
    )
