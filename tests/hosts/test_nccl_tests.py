"""The fabric check's tools on every GPU host (k3ops.deploys.nccl_tests)."""

import pytest

from k3ops.deploys.nccl_tests import MEMLOCK_LIMITS, NCCL_TESTS_PACKAGES
from k3ops.facts.apt import AptHeldPackages
from k3ops.nccl.launch import TEST_BINARIES
from k3ops.onhost import layout
from k3ops.settings import settings_of

MPI_USER = layout.NCCL_USER


@pytest.mark.applies_to("nvidia")
def test_nccl_tests_are_at_the_pinned_version_and_held_with_nccl(host, spec):
    wanted = settings_of(host.inventory_data).fabric.nccl_tests_version
    assert host.package("nccl-tests").version == wanted
    assert set(NCCL_TESTS_PACKAGES) <= set(host.get_fact(AptHeldPackages))


@pytest.mark.applies_to("amd")
def test_rccl_tests_follow_the_rocm_release(host, spec):
    assert host.package("rccl-tests").version.startswith(f"{spec.rocm_release}.")
    assert host.package("rccl").version == host.package("rccl-tests").version


@pytest.mark.applies_to("nvidia", "amd")
def test_the_mpi_user_runs_the_tests_and_mpirun(host, spec):
    binaries = TEST_BINARIES[spec.gpu_vendor]
    for command in ("mpirun --version", f"test -x {binaries}/all_reduce_perf", f"test -x {binaries}/alltoall_perf"):
        assert host.run(f"runuser -u {MPI_USER} -- {command}").rc == 0, command


@pytest.mark.applies_to("nvidia", "amd")
def test_the_mpi_users_sessions_may_lock_all_the_memory_rdma_registers(host, spec):
    """pam_limits reads the deploy's limits for the MPI user's sessions (runuser locally, sshd for the ranks
    mpirun starts on other hosts). Where root itself cannot lift a cap (a container without
    CAP_SYS_RESOURCE, as the lab's controller is) no session can, and the limits file is what is checked."""
    limits = host.file(MEMLOCK_LIMITS)
    assert limits.exists and f"{MPI_USER} - memlock unlimited" in limits.content_string.splitlines()
    if host.run("prlimit --memlock=unlimited:unlimited true").rc == 0:
        assert host.check_output(f"runuser -u {MPI_USER} -- sh -c 'ulimit -l'") == "unlimited"


@pytest.mark.applies_to("nvidia", "amd")
def test_the_mpi_key_is_the_mpi_users_alone_and_confined(host, spec):
    key = host.file(layout.NCCL_KEY)
    assert (key.user, key.mode) == (MPI_USER, 0o600)
    authorized = host.file(layout.NCCL_AUTHORIZED_KEYS).content_string
    entries = [line for line in authorized.splitlines() if line and not line.startswith("#")]
    assert len(entries) == 1 and entries[0].startswith("restrict")
    assert host.check_output(f"id -Gn {MPI_USER}").split().count("sudo") == 0
