"""What `k3ops nccl check` runs on a GPU host: nccl-tests (NVIDIA) or rccl-tests (AMD) at pinned versions,
Debian's OpenMPI, the RDMA port tools, and an unprivileged MPI user that the fleet's hosts reach with a key
of its own, confined to that user, without forwarding or a terminal, from the fleet's addresses only."""

from __future__ import annotations

import ipaddress

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from ..escape import authorized_keys_line
from ..facts.memo import remembered
from ..facts.network import RdmaNics
from ..onhost import layout
from ..operations import owned_files, packages
from ..settings import host_settings
from ..settings.fabric import FabricCheckSpec
from ..settings.host import GpuHostSpec
from . import fleet, rendered
from .fleet_keys import ensure_fleet_key
from .repositories import signed_repository
from .users import system_user

MPI_PACKAGES = ["openmpi-bin"]
RDMA_TOOLS = ["infiniband-diags", "ibverbs-utils"]  # ibstat, ibv_devinfo: the port pre-checks
NCCL_TESTS_PACKAGES = ["nccl-tests", "libnccl2"]  # held together: a test result names the NCCL it ran
MEMLOCK_LIMITS = "/etc/security/limits.d/k3ops-nccl.conf"  # RDMA pins buffers: no locked-memory cap
MPI_KEYS_HEADER = ("# Managed by k3ops: the fleet's MPI launch key, for the fabric check's runs between its hosts only\n"
                   "# (no forwarding, no terminal, from the fleet's addresses when all are IP addresses).\n")


def doca_sources(spec: GpuHostSpec) -> list:
    """NVIDIA's DOCA repository, for the RDMA port tools of a GPU host with RDMA NICs."""
    if spec.gpu_vendor is None or not remembered(RdmaNics):
        return []
    return signed_repository("doca", spec.repository("doca"))


@deploy("Fabric check tools")
def nccl_tests() -> None:
    settings = host_settings(host)
    spec, fabric = settings.gpu, settings.fabric
    if spec.gpu_vendor is None:
        host.noop("no GPUs: no fabric to check")
        return
    if remembered(RdmaNics):
        packages.installed(name="RDMA port tools (ibstat, ibv_devinfo)", packages=RDMA_TOOLS)
    packages.installed(name="OpenMPI, which launches the tests across hosts", packages=MPI_PACKAGES)
    if spec.gpu_vendor == "nvidia":
        packages.held_at(name=f"nccl-tests {fabric.nccl_tests_version}", packages=["nccl-tests"],
                         version=fabric.nccl_tests_version, hold=NCCL_TESTS_PACKAGES)
    else:  # the ROCm pin holds rccl and rccl-tests to the host's ROCm release
        packages.installed(name=f"rccl-tests of ROCm {spec.rocm_release}", packages=["rccl-tests"])
    mpi_user(spec.gpu_vendor, fabric)
    files.directory(name=f"Directory {layout.FABRIC_CHECK_DIR}", path=layout.FABRIC_CHECK_DIR, user="root",
                    group="root", mode="755")


def mpi_user(vendor: str, fabric: FabricCheckSpec) -> None:
    """NCCL_USER runs the tests: it holds the fleet's MPI key and accepts it from the fleet's hosts."""
    private_key, public_key = ensure_fleet_key(fabric.nccl_mpi_key, layout.NCCL_KEY_NAME)
    system_user(layout.NCCL_USER, "MPI user", shell="/bin/sh", groups=["render", "video"] if vendor == "amd" else None)
    owned_files.file(name="The fleet's MPI launch key", path=layout.NCCL_KEY, content=private_key.read_text(),
                     owner=layout.NCCL_USER, mode="600")
    owned_files.file(name="The fleet's hosts may launch MPI ranks as this user, nothing else",
                     path=layout.NCCL_AUTHORIZED_KEYS,
                     content=MPI_KEYS_HEADER + mpi_key_line(fleet_addresses(), public_key) + "\n",
                     owner=layout.NCCL_USER, mode="600")
    owned_files.config_file(name="No locked-memory limit for the MPI user (RDMA registers its buffers)",
                            path=MEMLOCK_LIMITS, content=rendered("k3ops/nccl-limits.conf"))


def mpi_key_line(addresses: list[str], public_key: str) -> str:
    """The MPI user's authorized_keys line: the fleet key, no forwarding or terminal, from `addresses` only
    (when given)."""
    return authorized_keys_line([("restrict", None), *([("from", ",".join(addresses))] if addresses else [])],
                                public_key)


def fleet_addresses() -> list[str]:
    """The addresses the fleet's GPU hosts reach each other on, when all are IP addresses (sshd matches a
    `from=` hostname only with UseDNS, so names would lock the fleet out: then no address limit)."""
    addresses = [host_settings(member).model.address_for_peers(member.name)
                 for member in fleet.members(lambda member: host_settings(member).gpu.gpu_vendor is not None)]
    try:
        return sorted({str(ipaddress.ip_address(address)) for address in addresses})
    except ValueError:
        return []
