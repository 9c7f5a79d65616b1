"""NVIDIA GPU host: an exact, pinned and held driver; fabric manager, DCGM and the container toolkit.

Read top to bottom it is the story of the host: trust the CUDA repository, pin and install one exact
driver release, keep nouveau out, reboot only when the loaded module is not the installed one (and
only where allowed), then start the services that need the driver and hand the GPUs to containers.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

from ..facts.nvidia import NvidiaKernelModule, NvSwitches
from ..operations import packages
from ..operations import nvidia as nvidia_operations
from ..spec import host_spec
from ..spec.host import GpuHostSpec
from . import TEMPLATES
from .reboot import reboot_if_needed
from .secure_boot import refuse_unsigned_modules
from .repositories import signed_repository

PIN_FILE = "/etc/apt/preferences.d/k3ops-nvidia-driver"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/k3ops-blacklist-nouveau.conf"
CDI_SPEC = "/etc/cdi/nvidia.yaml"
# NVIDIA's CUDA repository packages each driver release once: 580.126.09 is package version 580.126.09-1.
CUDA_PACKAGE_REVISION = "1"


def package_version(spec: GpuHostSpec) -> str:
    """The exact package version of the driver release (and of fabric manager, which moves with it)."""
    return f"{spec.nvidia_driver_version}-{CUDA_PACKAGE_REVISION}"


def driver_packages(spec: GpuHostSpec) -> list[str]:
    """The driver release as the CUDA repository splits it, for the chosen kernel module flavour."""
    modules = "nvidia-kernel-open-dkms" if spec.nvidia_kernel_modules == "open" else "nvidia-kernel-dkms"
    names = ["nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", modules]
    if spec.nvidia_kernel_modules == "open":
        names.insert(0, "nvidia-open")
    return names


def fabric_manager_package(spec: GpuHostSpec) -> str:
    """R580 renamed nvidia-fabricmanager-<branch> to plain nvidia-fabricmanager."""
    return "nvidia-fabricmanager" if spec.driver_branch >= 580 else f"nvidia-fabricmanager-{spec.driver_branch}"


def container_toolkit_packages() -> list[str]:
    return ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]


def needs_fabric_manager(spec: GpuHostSpec) -> bool:
    """NVSwitch boards need fabric manager: Hopper's NVSwitches show on PCI; NVLink 5 switch trays
    (Blackwell HGX) do not, so the board profile speaks for them."""
    if spec.fabric_manager != "auto":
        return spec.fabric_manager == "on"
    switches_on_pci = bool(host.get_fact(NvSwitches))
    if spec.nvswitch_expected and not switches_on_pci and spec.gpu_architecture == "Hopper":
        raise DeployError(f"{host.name}: hardware_profile {spec.hardware_profile!r} has NVSwitches but lspci shows "
                          "none; check the baseboard (or set fabric_manager) before deploying")
    return switches_on_pci or spec.nvswitch_expected


@deploy("NVIDIA GPU host")
def nvidia() -> None:
    spec = host_spec(host)
    refuse_unsigned_modules(spec)
    version = package_version(spec)
    driver_names = driver_packages(spec)
    fabric_manager = needs_fabric_manager(spec)
    pinned = driver_names + ([fabric_manager_package(spec)] if fabric_manager else [])

    repository = signed_repository("cuda", spec.repository("cuda"))
    pin = files.template(
        name="Pin the driver packages to the exact release",
        src=str(TEMPLATES / "apt" / "nvidia-driver-pin.pref.j2"),
        dest=PIN_FILE, packages=pinned, version=version,
    )
    packages.update(name="Refresh apt after repository or pin changes", _if=any_changed(*repository, pin))
    driver = apt.packages(
        name=f"Install NVIDIA driver {spec.nvidia_driver_version} ({spec.nvidia_kernel_modules} modules)",
        packages=[f"{name}={version}" for name in driver_names],
        allow_downgrades=True, extra_install_args="--allow-change-held-packages", no_recommends=True,
    )
    packages.held(name="Hold the driver packages", packages=pinned)

    nouveau = files.put(
        name="Blacklist nouveau",
        src=str(TEMPLATES / "modprobe" / "blacklist-nouveau.conf"),
        dest=NOUVEAU_BLACKLIST, mode="644",
    )
    server.shell(name="Rebuild the initramfs without nouveau",
                 commands=["if command -v update-initramfs >/dev/null; then update-initramfs -u; fi"],
                 _if=nouveau.did_change)

    loaded = host.get_fact(NvidiaKernelModule)
    driver_loaded = reboot_if_needed(
        spec, reason=f"load NVIDIA kernel module {spec.nvidia_driver_version}",
        needed=lambda: driver.did_change() or nouveau.did_change()
        or (loaded or {}).get("version") != spec.nvidia_driver_version,
        verify=f"test \"$(cat /sys/module/nvidia/version 2>/dev/null)\" = {spec.nvidia_driver_version}",
    )

    systemd.service(name="Enable nvidia-persistenced", service="nvidia-persistenced", running=True, enabled=True,
                    _if=driver_loaded)
    if fabric_manager:
        moved = apt.packages(name="Install fabric manager at the driver's exact version",
                             packages=[f"{fabric_manager_package(spec)}={version}"],
                             allow_downgrades=True, extra_install_args="--allow-change-held-packages")
        packages.held(name="Hold fabric manager", packages=[fabric_manager_package(spec)])
        systemd.service(name="Enable fabric manager", service="nvidia-fabricmanager", running=True, enabled=True,
                        _if=driver_loaded)
        # A running fabric manager keeps its old binary until restarted: restart it onto the new one.
        systemd.service(name="Restart fabric manager on its new version", service="nvidia-fabricmanager",
                        restarted=True, _if=lambda: moved.did_change() and driver_loaded())
    if spec.dcgm:
        cuda_major = spec.required_cuda.split(".")[0]
        apt.packages(name="Install DCGM", packages=[f"datacenter-gpu-manager-4-cuda{cuda_major}"], no_recommends=True)
        systemd.service(name="Enable DCGM", service="nvidia-dcgm", running=True, enabled=True, _if=driver_loaded)

    toolkit_repository = signed_repository("container_toolkit", spec.repository("container_toolkit"))
    packages.update(name="Refresh apt after the toolkit repository changed", _if=any_changed(*toolkit_repository))
    apt.packages(name=f"Install NVIDIA Container Toolkit {spec.container_toolkit_version}",
                 packages=[f"{name}={spec.container_toolkit_version}" for name in container_toolkit_packages()],
                 allow_downgrades=True, no_recommends=True)
    runtime = nvidia_operations.container_runtime(name="Add the nvidia runtime to Docker's config", runtime="docker")
    systemd.service(name="Restart Docker to load the nvidia runtime", service="docker", restarted=True,
                    _if=runtime.did_change)
    nvidia_operations.cdi_spec(name="Keep the CDI spec fresh", output=CDI_SPEC, _if=driver_loaded)
