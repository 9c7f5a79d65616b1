"""NVIDIA GPU host: an exact, pinned and held driver; its NVLink fabric, GPUDirect RDMA, DCGM and the
container toolkit, each pinned and held too.

Read top to bottom it is the story of the host: trust the CUDA repository, pin and install one exact
driver release, keep nouveau out, reboot only when the loaded module is not the installed one (and
only where allowed), then start the services that need the driver and hand the GPUs to containers.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from ..facts.memo import remembered
from ..facts.nvidia import NvidiaKernelModule
from ..operations import owned_files, packages, units
from ..operations import nvidia as nvidia_operations
from ..settings import host_settings
from ..settings.host import GpuHostSpec
from ..vendor_units import DCGM, DOCKER, PERSISTENCED
from . import rendered
from .gpudirect import gpudirect_rdma
from .monitoring import dcgm_exporter
from .nvlink import fabric_packages, nvlink_fabric, wants_fabric_manager
from .reboot import reboot_if_needed, refuse_release_change_while_serving
from .secure_boot import refuse_unsigned_modules
from .repositories import signed_repository

PIN_FILE = "/etc/apt/preferences.d/k3ops-nvidia-driver"
NOUVEAU_BLACKLIST = "/etc/modprobe.d/k3ops-blacklist-nouveau.conf"
CDI_SPEC = "/etc/cdi/nvidia.yaml"
# NVIDIA's CUDA repository packages each driver release once: 580.126.09 is package version 580.126.09-1.
CUDA_PACKAGE_REVISION = "1"


def package_version(spec: GpuHostSpec) -> str:
    """The exact package version of the driver release (and of fabric manager, which moves with it)."""
    return release_package_version(spec.nvidia_driver_version)


def release_package_version(release: str) -> str:
    """The package version of a driver release, as the CUDA repository numbers it."""
    return f"{release}-{CUDA_PACKAGE_REVISION}"


def driver_packages(spec: GpuHostSpec) -> list[str]:
    """The driver release as the CUDA repository splits it, for the chosen kernel module flavour."""
    modules = "nvidia-kernel-open-dkms" if spec.nvidia_kernel_modules == "open" else "nvidia-kernel-dkms"
    names = ["nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced", modules]
    if spec.nvidia_kernel_modules == "open":
        names.insert(0, "nvidia-open")
    return names


def container_toolkit_packages() -> list[str]:
    return ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]


def dcgm_packages(spec: GpuHostSpec) -> list[str]:
    """DCGM for the engine's CUDA major version, and its core at the same version."""
    return [f"datacenter-gpu-manager-4-cuda{spec.required_cuda.split('.')[0]}", "datacenter-gpu-manager-4-core"]


def staged_packages(spec: GpuHostSpec) -> list[str]:
    """`name=version` of the driver release and of the fabric packages that move with it."""
    names = driver_packages(spec) + fabric_packages(spec, wants_fabric_manager(spec))
    return [f"{name}={package_version(spec)}" for name in names]


@deploy("Stage the NVIDIA driver")
def staged_driver() -> None:
    """The spec's driver release downloaded, not installed: a rollout stages a whole batch before draining any of
    it, so a slow or broken mirror is found while every host still serves."""
    spec = host_settings(host).gpu
    if spec.gpu_vendor != "nvidia":
        host.noop("no NVIDIA GPUs on this host")
        return
    packages.downloaded(name=f"Stage NVIDIA driver {spec.nvidia_driver_version}", packages=staged_packages(spec))


def nvidia_sources(spec: GpuHostSpec) -> list:
    """The CUDA repository with the driver's pin, and the container toolkit's repository."""
    pinned = driver_packages(spec) + fabric_packages(spec, wants_fabric_manager(spec))
    pin = owned_files.config_file(
        name="Pin the driver packages to the exact release", path=PIN_FILE,
        content=rendered("apt/nvidia-driver-pin.pref.j2", packages=pinned, version=package_version(spec)),
    )
    return [*signed_repository("cuda", spec.repository("cuda")), pin,
            *signed_repository("container_toolkit", spec.repository("container_toolkit"))]


@deploy("NVIDIA GPU host")
def nvidia() -> None:
    spec = host_settings(host).gpu
    refuse_unsigned_modules(spec)
    version = package_version(spec)
    driver_names = driver_packages(spec)
    fabric_manager = wants_fabric_manager(spec)

    loaded = remembered(NvidiaKernelModule)
    refuse_release_change_while_serving((loaded or {}).get("version"), spec.nvidia_driver_version,
                                        "NVIDIA driver", "nvidia_driver_version", "driver")

    driver = packages.held_at(
        name=f"Install NVIDIA driver {spec.nvidia_driver_version} ({spec.nvidia_kernel_modules} modules)",
        packages=driver_names, version=version,
    )

    nouveau = owned_files.config_file(name="Blacklist nouveau", path=NOUVEAU_BLACKLIST,
                                      content=rendered("modprobe/blacklist-nouveau.conf"))
    server.shell(name="Rebuild the initramfs without nouveau",
                 commands=["if command -v update-initramfs >/dev/null; then update-initramfs -u; fi"],
                 _if=nouveau.did_change)

    driver_loaded = reboot_if_needed(
        spec, reason=f"load NVIDIA kernel module {spec.nvidia_driver_version}",
        needed=lambda: driver.did_change() or nouveau.did_change()
        or (loaded or {}).get("version") != spec.nvidia_driver_version,
        verify=f"test \"$(cat /sys/module/nvidia/version 2>/dev/null)\" = {spec.nvidia_driver_version}",
    )

    units.service(name="Enable nvidia-persistenced", unit=PERSISTENCED, running=True, enabled=True,
                  _if=driver_loaded)
    nvlink_fabric(spec, version, fabric_manager, driver_loaded)
    gpudirect_rdma(spec, driver_loaded)
    if spec.dcgm:
        packages.held_at(name=f"Install DCGM {spec.dcgm_version}", packages=dcgm_packages(spec),
                         version=spec.dcgm_version)
        units.service(name="Enable DCGM", unit=DCGM, running=True, enabled=True, _if=driver_loaded)
        dcgm_exporter(spec, driver_loaded)

    packages.held_at(name=f"Install NVIDIA Container Toolkit {spec.container_toolkit_version}",
                     packages=container_toolkit_packages(), version=spec.container_toolkit_version)
    runtime = nvidia_operations.container_runtime(name="Add the nvidia runtime to Docker's config", runtime="docker")
    units.service(name="Restart Docker to load the nvidia runtime", unit=DOCKER, restarted=True,
                  _if=runtime.did_change)
    nvidia_operations.cdi_spec(name="Keep the CDI spec fresh", output=CDI_SPEC, _if=driver_loaded)
