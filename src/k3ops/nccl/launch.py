"""The command lines of the tests: one host alone, or an engine cluster's hosts under OpenMPI over SSH.

Every test runs as the unprivileged MPI user, inside `timeout` (a hang must end, and is reported as
one), one process per host driving all its GPUs (`-g`), and prints NCCL's warnings (NCCL_DEBUG=WARN)
so that a failed or hung run says why. Inventory values reach the shell only through shlex.quote.
"""

from __future__ import annotations

import shlex

from ..escape import SSH_PORT, known_hosts_line
from ..onhost import layout
from ..settings.fabric import FabricCheckSpec

TEST_BINARIES = {"nvidia": "/usr/bin", "amd": "/opt/rocm/bin"}  # nccl-tests' and rccl-tests' packages
SIZES_BELOW_TARGET = 3  # rows at 1/8, 1/4 and 1/2 of the target size show the curve up to it
KILL_AFTER_SECONDS = 10
TIMED_OUT = (124, 137)  # timeout(1): the limit passed (and, 137, the test ignored SIGTERM)
# MPI's own traffic (launch, bootstrap) over TCP; NCCL picks the RDMA NICs itself.
MPI_TRANSPORT = ("--mca", "pml", "ob1", "--mca", "btl", "self,tcp")
UNUSABLE_INTERFACES = "lo,docker0"
# The fabric, not NVLink SHARP or tree shortcuts: on 2 hosts NCCL's tree "can indeed go beyond the network
# bottleneck" (sjeaugey, nccl-tests#196), so all_reduce across hosts is measured on rings.
ACROSS_HOSTS_ENVIRONMENT = {"all_reduce": {"NCCL_ALGO": "Ring"}, "alltoall": {}}
# One host's GPUs with neither peer access nor shared memory: NCCL's only path is out through the NICs and back.
NIC_LOOPBACK_ENVIRONMENT = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def test_arguments(collective: str, vendor: str, gpus: int, message_bytes: int) -> list[str]:
    sizes = ["-b", str(message_bytes >> SIZES_BELOW_TARGET), "-e", str(message_bytes), "-f", "2"]
    return [f"{TEST_BINARIES[vendor]}/{collective}_perf", *sizes, "-g", str(gpus), "-c", "1"]


def environment(fabric: FabricCheckSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    settings = {"NCCL_DEBUG": "WARN", **(extra or {}), **fabric.nccl_environment}
    if fabric.nccl_bootstrap_interface:
        settings["NCCL_SOCKET_IFNAME"] = fabric.nccl_bootstrap_interface
    return settings


def as_mpi_user(command: list[str], timeout_seconds: int) -> str:
    """A shell command: `command` run as NCCL_USER in a session of its own (runuser's PAM session applies
    its locked-memory limit, as sshd's does for the ranks on other hosts), ended after `timeout_seconds`."""
    return shlex.join(["timeout", f"--kill-after={KILL_AFTER_SECONDS}", str(timeout_seconds), "runuser", "-u",
                       layout.NCCL_USER, "--", "env", f"HOME={layout.home(layout.NCCL_USER)}", *command])


def single_host(collective: str, vendor: str, gpus: int, fabric: FabricCheckSpec, nic_loopback: bool = False) -> str:
    extra = NIC_LOOPBACK_ENVIRONMENT if nic_loopback else None
    settings = [f"{name}={value}" for name, value in environment(fabric, extra).items()]
    return as_mpi_user([*settings, *test_arguments(collective, vendor, gpus, fabric.message_bytes)],
                       fabric.nccl_timeout_seconds)


def across_hosts(collective: str, vendor: str, gpus: int, addresses: list[str], fabric: FabricCheckSpec) -> str:
    """mpirun on the first host: one rank per host, launched over SSH with the fleet's MPI key, each host's
    key checked against the run's known_hosts (written by the check), no tree spawn (the first host
    starts every daemon itself)."""
    ssh = (f"-i {layout.NCCL_KEY} -o BatchMode=yes -o StrictHostKeyChecking=yes "
           f"-o UserKnownHostsFile={layout.NCCL_KNOWN_HOSTS}")
    interface = fabric.nccl_bootstrap_interface
    network = (["--mca", "btl_tcp_if_include", interface, "--mca", "oob_tcp_if_include", interface] if interface
               else ["--mca", "btl_tcp_if_exclude", UNUSABLE_INTERFACES, "--mca", "oob_tcp_if_exclude",
                     UNUSABLE_INTERFACES])
    exported = []
    for name, value in environment(fabric, ACROSS_HOSTS_ENVIRONMENT[collective]).items():
        exported += ["-x", f"{name}={value}"]
    command = ["mpirun", "--np", str(len(addresses)), "--host", ",".join(f"{address}:1" for address in addresses),
               "--map-by", "ppr:1:node", "--bind-to", "none", "--mca", "plm_rsh_no_tree_spawn", "1",
               "--mca", "plm_rsh_args", ssh, *MPI_TRANSPORT, *network, *exported,
               *test_arguments(collective, vendor, gpus, fabric.message_bytes)]
    return as_mpi_user(command, fabric.nccl_timeout_seconds)


def known_hosts(host_keys: dict[str, str]) -> str:
    """known_hosts lines for the run's hosts (reached on port 22): address -> its `ssh-ed25519 AAAA...` public
    host key."""
    return "".join(f"{known_hosts_line(address, SSH_PORT, key)}\n" for address, key in sorted(host_keys.items()))
