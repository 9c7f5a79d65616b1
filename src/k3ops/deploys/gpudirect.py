"""GPUDirect RDMA: NICs reading and writing GPU memory directly, without which NCCL's inter-node traffic
bounces through host memory. nvidia-peermem is not loaded by any device and must be named to load at
each boot; DMA-BUF needs no module, only the open kernel modules and a kernel of 5.12 or later."""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import KernelVersion
from pyinfra.operations import files, server

from ..facts.kernel import KernelModuleLoaded
from ..facts.memo import remembered
from ..facts.network import RdmaNics
from ..hardware import kernel_supports_dmabuf
from ..operations import owned_files
from ..settings.host import GpuHostSpec

PEERMEM_MODULE = "nvidia-peermem"
PEERMEM_AT_BOOT = "/etc/modules-load.d/k3ops-nvidia-peermem.conf"


def gpudirect_rdma(spec: GpuHostSpec, driver_loaded: Callable[[], bool]) -> None:
    mode = spec.gpudirect_mode(remembered(RdmaNics))
    if mode == "dmabuf" and not kernel_supports_dmabuf(kernel := remembered(KernelVersion)):
        raise DeployError(f"{host.name}: gpudirect_rdma: 'dmabuf' needs Linux 5.12 or later; this host runs "
                          f"{kernel} (use 'peermem')")
    if mode != "peermem":
        files.file(name=f"No {PEERMEM_MODULE} at boot ({mode})", path=PEERMEM_AT_BOOT, present=False)
        return
    owned_files.config_file(name=f"Load {PEERMEM_MODULE} at every boot", path=PEERMEM_AT_BOOT,
                            content=f"{PEERMEM_MODULE}\n")
    if not remembered(KernelModuleLoaded, module=PEERMEM_MODULE):
        server.shell(name=f"Load {PEERMEM_MODULE} now", commands=[f"modprobe {PEERMEM_MODULE}"], _if=driver_loaded)
