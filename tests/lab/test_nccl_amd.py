"""`k3ops nccl check` on an AMD pair: rccl-tests of the host's ROCm release under the real mpirun; then
`k3ops upgrade rocm` moves the pair to the lab's next ROCm release, amdgpu with it, validated by the ROCm host checks
and RCCL."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import host_checks, k3ops, lab_inventory, on_host, pyinfra

LAB_PROFILES = ("mi355x8", "mi355x8")
HOSTS = ("gpu-01", "gpu-02")
RELEASE, NEXT_RELEASE = "7.0.2", "7.1.0"  # the lab's two releases an MI355X runs (6.4 does not support CDNA4)


@pytest.fixture(scope="module")
def pair(lab, tmp_path_factory):
    """The pair with the GPU host deploy only: no engine (the rollout would wait for one to serve)."""
    inventory = lab_inventory(tmp_path_factory.mktemp("nccl-amd") / "pair.py", nccl_group="mi355x-a", engine=None,
                              rocm_release=RELEASE, upgrade_lb_settle_seconds=1, upgrade_soak_seconds=2,
                              reboot_timeout_seconds=300)
    deployed = pyinfra("deploys/gpu_host.py", inventory=inventory)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    return inventory


def test_the_fabric_tools_pass_their_host_checks(pair):
    checked = host_checks(pair, checks="tests/hosts/test_nccl_tests.py")
    assert checked.returncode == 0, checked.stdout[-3000:]


def test_an_amd_pair_runs_rccl_across_hosts(pair):
    result = k3ops("nccl", "check", pair, "--json", check=False)
    found = json.loads(result.stdout)
    assert result.returncode == 0 and found["passed"], result.stdout[-4000:]
    for name in HOSTS:
        host = found["hosts"][name]
        assert host["driver"] == f"ROCm {RELEASE}" and host["tests_version"].startswith("2.")
        across = [test for test in host["tests"] if test["hosts"] == ["gpu-01", "gpu-02"]]
        assert {test["test"] for test in across} == {"cluster_all_reduce", "cluster_alltoall"}
        assert all(test["busbw"] >= test["threshold"] for test in host["tests"])
        assert host["library"]  # the RCCL the tests ran on, as rccl-tests reported it


def boot_id(host: str) -> str:
    return on_host(host, "cat /proc/sys/kernel/random/boot_id").stdout.strip()


def test_a_rollout_moves_the_pair_to_the_next_rocm_release_onto_its_amdgpu(pair, tmp_path, monkeypatch):
    """Each host staged while it serves, moved to the release's amdgpu-dkms, ROCm, RCCL and rccl-tests, rebooted
    onto the new amdgpu, and validated (the ROCm host checks, the fabric check on RCCL, the doctor) before it is
    done."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    boots = {host: boot_id(host) for host in HOSTS}
    moved = k3ops("upgrade", "rocm", pair, "--to", NEXT_RELEASE, "--canary", "0", "--max-unavailable", "2",
                  check=False)
    assert moved.returncode == 0, moved.stdout[-4000:] + moved.stderr[-2000:]
    assert f"every upgraded host runs {NEXT_RELEASE}" in moved.stdout and "rocm_release" in moved.stdout
    found = json.loads(k3ops("upgrade", "status", pair, "--json").stdout)
    assert found["release"] == "rocm" and {group["state"] for group in found["groups"]} == {"done"}
    for host in HOSTS:
        group = next(group for group in found["groups"] if group["name"] == host)
        assert group["from"] == {host: RELEASE}  # what it ran, for a rollback
        assert boot_id(host) != boots[host]
        package = on_host(host, "dpkg-query -W -f '${Version}' amdgpu-dkms").stdout  # 1:6.16.6.70100-...
        module = re.fullmatch(r"1:(\d+\.\d+\.\d+)\.70100-.+", package)
        assert module and on_host(host, "cat /sys/module/amdgpu/version").stdout.strip() == module[1]
        assert on_host(host, "cat /opt/rocm/.info/version").stdout.startswith(f"{NEXT_RELEASE}-")
        assert "amdgpu-dkms" in on_host(host, "apt-mark showhold").stdout.split()
        assert f"/{NEXT_RELEASE}" in on_host(host, "cat /etc/apt/sources.list.d/k3ops-rocm.list").stdout
    # The ROCm and fabric host checks at the new release, as the next plain deploy will judge the hosts.
    for checks in ("tests/hosts/test_rocm.py", "tests/hosts/test_nccl_tests.py"):
        checked = host_checks(pair, "--data", f"rocm_release={NEXT_RELEASE}", checks=checks)
        assert checked.returncode == 0, checked.stdout[-3000:]
