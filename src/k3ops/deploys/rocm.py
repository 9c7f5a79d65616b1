"""AMD GPU host: one exact ROCm release with its amdgpu driver held, GPU access for the service
user, the kernel arguments AMD's Instinct system optimization guides ask for (MI300X, MI355X):
the IOMMU in pass-through mode and no PCI resource reallocation, and AMD's metrics exporter."""

from __future__ import annotations

from fnmatch import fnmatchcase

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import server
from pyinfra.operations.util import any_changed

from ..facts.amd import AmdgpuModule, amdgpu_release
from ..onhost.drivers import amdgpu_differs
from ..facts.apt import AptPolicyVersion
from ..facts.boot import KernelCommandLine
from ..facts.memo import remembered
from ..hardware import AMD_KERNEL_ARGUMENTS
from ..onhost.layout import STAGED_APT_DIR
from ..operations import kernel, owned_files, packages
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from . import rendered
from .monitoring import amd_metrics_exporter
from .reboot import reboot_if_needed, refuse_release_change_while_serving
from .secure_boot import refuse_unsigned_modules
from .users import system_user
from .repositories import signed_repository, source_line

PIN_FILE = "/etc/apt/preferences.d/k3ops-rocm"
ROCM_PACKAGES = ["amdgpu-dkms", "rocm"]


def release_number(release: str) -> str:
    """AMD's packages carry the release as a number: 7.0.2 -> 70002, 6.4.1 -> 60401."""
    major, minor, patch = (int(part) for part in release.split("."))
    return f"{major * 10000 + minor * 100 + patch}"


def rocm_pins(spec: GpuHostSpec) -> list[tuple[str, str]]:
    """(package pattern, version glob) pairs that hold every ROCm package to the one release."""
    return [("amdgpu-dkms amdgpu-dkms-firmware", f"1:*.{release_number(spec.rocm_release)}-*"),
            ("rocm rocm-* amd-smi-lib hip-* rccl*", f"{spec.rocm_release}.*")]


def rocm_pin(spec: GpuHostSpec) -> str:
    """The apt preferences that hold every ROCm package to the spec's release (the host's, or a staged one's)."""
    return rendered("apt/rocm-pin.pref.j2", pins=rocm_pins(spec), release=spec.rocm_release)


def rocm_sources(spec: GpuHostSpec) -> list:
    """The amdgpu and ROCm repositories of the spec's release, and the pin that holds every package to it."""
    pin = owned_files.config_file(name=f"Pin ROCm to release {spec.rocm_release}", path=PIN_FILE,
                                  content=rocm_pin(spec))
    return [*signed_repository("amdgpu", spec.repository("amdgpu")),
            *signed_repository("rocm", spec.repository("rocm")), pin]


def pinned_installed(spec: GpuHostSpec) -> list[str]:
    """ROCM_PACKAGES and every other installed package the release's pin holds (rccl and rccl-tests, which
    nothing asks for at a version): a new release moves them all together."""
    patterns = [pattern for names, _ in rocm_pins(spec) for pattern in names.split()]
    return [*ROCM_PACKAGES, *sorted(name for name in remembered(DebPackages) if name not in ROCM_PACKAGES
                                    and any(fnmatchcase(name, pattern) for pattern in patterns))]


@deploy("Stage a ROCm release")
def staged_release() -> None:
    """The spec's ROCm release downloaded, not installed: a rollout stages a whole batch before draining any of it,
    so a slow or broken mirror is found while every host still serves. The release's repositories and pin are read
    through a private apt configuration (STAGED_APT_DIR) with the keys the host already trusts: the host's own
    sources keep naming the release it runs until its deploy moves it."""
    spec = host_settings(host).gpu
    if spec.gpu_vendor != "amd":
        host.noop("no AMD GPUs on this host")
        return
    owned_files.directory(name=f"Directory {STAGED_APT_DIR}", path=STAGED_APT_DIR, owner="root")
    owned_files.config_file(name=f"The repositories of ROCm {spec.rocm_release}, for staging",
                            path=f"{STAGED_APT_DIR}/sources.list",
                            content="".join(source_line(name, spec.repository(name)) + "\n"
                                            for name in ("amdgpu", "rocm")))
    owned_files.config_file(name=f"The pin of ROCm {spec.rocm_release}, for staging",
                            path=f"{STAGED_APT_DIR}/preferences", content=rocm_pin(spec))
    amdgpu, rocm = (version for _, version in rocm_pins(spec))
    packages.downloaded_from(name=f"Stage ROCm {spec.rocm_release}", directory=STAGED_APT_DIR,
                             packages={"amdgpu-dkms": amdgpu, "rocm": rocm})


@deploy("AMD GPU host")
def rocm(sources: list) -> None:
    """sources: the operations of rocm_sources, run before this: a new release moves what is installed."""
    spec = host_settings(host).gpu
    refuse_unsigned_modules(spec)
    loaded, booted_with = remembered(AmdgpuModule), set(remembered(KernelCommandLine))
    # A driver installed by a run that did not get to its reboot (killed, or a reboot refused) is loaded by this one.
    on_disk = remembered(AptPolicyVersion, package="amdgpu-dkms")["installed"]
    refuse_release_change_while_serving(amdgpu_release(loaded, on_disk), spec.rocm_release, "ROCm", "rocm_release",
                                        "rocm")
    installed = packages.installed(name=f"Install amdgpu-dkms and ROCm {spec.rocm_release}", packages=ROCM_PACKAGES,
                                   extra_install_args="--allow-change-held-packages")
    moved = server.shell(
        name=f"Move installed ROCm packages to release {spec.rocm_release}",
        commands=[StringCommand("DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--allow-downgrades",
                                "--allow-change-held-packages",
                                *(QuoteString(name) for name in pinned_installed(spec)))],
        _if=lambda: any_changed(*sources)() and not installed.did_change(),
    )
    packages.held(name="Hold the amdgpu driver", packages=["amdgpu-dkms"])
    for group in ("render", "video"):  # udev makes them on most hosts; a minimal image may lack render
        server.group(name=f"Ensure the {group} group", group=group, system=True)
    system_user(spec.service_user, "Service user with the GPUs (render, video):", groups=["render", "video"])
    arguments = kernel.boot_arguments(name=f"Kernel arguments {' '.join(AMD_KERNEL_ARGUMENTS)}",
                                      arguments=list(AMD_KERNEL_ARGUMENTS))

    driver_loaded = reboot_if_needed(
        spec, reason=f"load amdgpu for ROCm {spec.rocm_release} and apply {' '.join(AMD_KERNEL_ARGUMENTS)}",
        needed=lambda: installed.did_change() or moved.did_change() or arguments.did_change() or loaded is None
        or amdgpu_differs(loaded, on_disk) or not booted_with >= set(AMD_KERNEL_ARGUMENTS),
        verify=" && ".join(["test -c /dev/kfd", *(f"grep -qw {argument} /proc/cmdline" for argument in AMD_KERNEL_ARGUMENTS)]),
    )
    amd_metrics_exporter(driver_loaded)
