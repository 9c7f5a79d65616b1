"""What `k3ops nccl check` runs on a GPU host: nccl-tests (NVIDIA) or rccl-tests (AMD) at pinned versions,
Debian's OpenMPI, the RDMA port tools, and an unprivileged MPI user that the fleet's hosts reach with a key
of its own, confined to that user, without forwarding or a terminal, from the fleet's addresses only."""

from __future__ import annotations

import ipaddress

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import apt, files, server
from pyinfra.operations.util import any_changed

from ..escape import authorized_keys_line
from ..facts.network import RdmaNics
from ..onhost import layout
from ..operations import packages
from ..spec import host_spec, model_host_spec
from ..spec.fabric import FabricCheckSpec
from . import TEMPLATES, fleet
from .fleet_keys import ensure_fleet_key
from .repositories import signed_repository

MPI_PACKAGES = ["openmpi-bin"]
RDMA_TOOLS = ["infiniband-diags", "ibverbs-utils"]  # ibstat, ibv_devinfo: the port pre-checks
NCCL_TESTS_PACKAGES = ["nccl-tests", "libnccl2"]  # held together: a test result names the NCCL it ran
MEMLOCK_LIMITS = "/etc/security/limits.d/k3ops-nccl.conf"  # RDMA pins buffers: no locked-memory cap


@deploy("Fabric check tools")
def nccl_tests() -> None:
    spec, fabric = host_spec(host), FabricCheckSpec.model_validate(host.data.dict())
    if spec.gpu_vendor is None:
        host.noop("no GPUs: no fabric to check")
        return
    if host.get_fact(RdmaNics):
        repository = signed_repository("doca", spec.repository("doca"))
        packages.update(name="Refresh apt after the DOCA repository changes", _if=any_changed(*repository))
        apt.packages(name="RDMA port tools (ibstat, ibv_devinfo)", packages=RDMA_TOOLS, no_recommends=True)
    apt.packages(name="OpenMPI, which launches the tests across hosts", packages=MPI_PACKAGES, no_recommends=True)
    if spec.gpu_vendor == "nvidia":
        apt.packages(name=f"nccl-tests {fabric.nccl_tests_version}",
                     packages=[f"nccl-tests={fabric.nccl_tests_version}"], allow_downgrades=True,
                     extra_install_args="--allow-change-held-packages", no_recommends=True)
        packages.held(name="Hold nccl-tests and NCCL", packages=NCCL_TESTS_PACKAGES)
    else:  # the ROCm pin holds rccl and rccl-tests to the host's ROCm release
        apt.packages(name=f"rccl-tests of ROCm {spec.rocm_release}", packages=["rccl-tests"], no_recommends=True)
    mpi_user(spec.gpu_vendor, fabric)
    files.directory(name=f"Directory {layout.FABRIC_CHECK_DIR}", path=layout.FABRIC_CHECK_DIR, mode="755")


def mpi_user(vendor: str, fabric: FabricCheckSpec) -> None:
    """NCCL_USER runs the tests: it holds the fleet's MPI key and accepts it from the fleet's hosts."""
    private_key, public_key = ensure_fleet_key(fabric.nccl_mpi_key, layout.NCCL_KEY_NAME)
    home = layout.home(layout.NCCL_USER)
    server.user(name=f"MPI user {layout.NCCL_USER}", user=layout.NCCL_USER, system=True, shell="/bin/sh", home=home,
                create_home=True, groups=["render", "video"] if vendor == "amd" else None)
    files.directory(name=f"Directory ~{layout.NCCL_USER}/.ssh", path=f"{home}/.ssh", user=layout.NCCL_USER,
                    group=layout.NCCL_USER, mode="700")
    files.put(name="The fleet's MPI launch key", src=str(private_key), dest=layout.NCCL_KEY, user=layout.NCCL_USER,
              group=layout.NCCL_USER, mode="600", _temp_dir=f"{home}/.ssh")
    files.template(name="The fleet's hosts may launch MPI ranks as this user, nothing else",
                   src=str(TEMPLATES / "k3ops" / "nccl-authorized-keys.j2"), dest=layout.NCCL_AUTHORIZED_KEYS,
                   user=layout.NCCL_USER, group=layout.NCCL_USER, mode="600",
                   key_line=mpi_key_line(fleet_addresses(), public_key))
    files.put(name="No locked-memory limit for the MPI user (RDMA registers its buffers)",
              src=str(TEMPLATES / "k3ops" / "nccl-limits.conf"), dest=MEMLOCK_LIMITS, mode="644")


def mpi_key_line(addresses: list[str], public_key: str) -> str:
    """The MPI user's authorized_keys line: the fleet key, no forwarding or terminal, from `addresses` only
    (when given)."""
    return authorized_keys_line([("restrict", None), *([("from", ",".join(addresses))] if addresses else [])],
                                public_key)


def fleet_addresses() -> list[str]:
    """The addresses the fleet's GPU hosts reach each other on, when all are IP addresses (sshd matches a
    `from=` hostname only with UseDNS, so names would lock the fleet out: then no address limit)."""
    addresses = [model_host_spec(member).address_for_peers(member.name)
                 for member in fleet.members(lambda member: host_spec(member).gpu_vendor is not None)]
    try:
        return sorted({str(ipaddress.ip_address(address)) for address in addresses})
    except ValueError:
        return []
