"""`k3ops nccl check` on an AMD pair: rccl-tests of the host's ROCm release under the real mpirun."""

from __future__ import annotations

import json

import pytest

from .conftest import host_checks, k3ops, lab_inventory, pyinfra

LAB_PROFILES = ("mi355x8", "mi355x8")


@pytest.fixture(scope="module")
def pair(lab, tmp_path_factory):
    inventory = lab_inventory(tmp_path_factory.mktemp("nccl-amd") / "pair.py", nccl_group="mi355x-a")
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
    for name in ("gpu-01", "gpu-02"):
        host = found["hosts"][name]
        assert host["driver"] == "ROCm 7.0.2" and host["tests_version"].startswith("2.")
        across = [test for test in host["tests"] if test["hosts"] == ["gpu-01", "gpu-02"]]
        assert {test["test"] for test in across} == {"cluster_all_reduce", "cluster_alltoall"}
        assert all(test["busbw"] >= test["threshold"] for test in host["tests"])
        assert host["library"]  # the RCCL the tests ran on, as rccl-tests reported it
