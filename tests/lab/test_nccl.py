"""`k3ops nccl check` on six h200x8 lab hosts: the real mpirun across hosts over SSH, simulated GPUs and NICs.

One engine cluster (gpu-01, gpu-02: the 2-node vLLM recipe) and two test groups of two (nccl_group). A
healthy fleet passes; each fault injected into one host's hardware fails and names that host and the
cause; a host that only moves half its NICs' bandwidth is found by pairing; the engine's gate follows the
last result.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from k3ops_lab import faults

from ..conftest import REPO_ROOT
from .conftest import host_checks, k3ops, lab_inventory, on_host, pyinfra, pyinfra_command

LAB_PROFILES = ("h200x8",) * 4
HOSTS = [f"gpu-{index:02d}" for index in range(1, 5)]
DIGEST = "sha256:" + "5e" * 32
ENGINE_CLUSTER = {"recipe": "vllm-h200x8-2node", "cluster": "h200-a", "image_digest": DIGEST}
GROUPS = {"gpu-03": "h200-b", "gpu-04": "h200-b"}
HARDWARE = faults.HARDWARE
PER_HOST = {"gpu-01": {"engine": ENGINE_CLUSTER}, "gpu-02": {"engine": ENGINE_CLUSTER},
            **{name: {"nccl_group": group} for name, group in GROUPS.items()}}


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    inventory = lab_inventory(tmp_path_factory.mktemp("nccl") / "fleet.py", per_host=PER_HOST)
    deployed = pyinfra("deploys/gpu_host.py", inventory=inventory)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    return inventory


def nccl_check(inventory: str, *arguments: str) -> tuple[int, dict]:
    result = k3ops("nccl", "check", inventory, "--json", *arguments, check=False)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def edit_hardware(host: str, change: str) -> None:
    """Change the host's hardware document (`h`, in Python), as a fault in the machine itself would."""
    on_host(host, faults.edit_hardware(change))


def check_with_fault(inventory: str, host: str, fault: str, value, *arguments: str) -> tuple[int, dict]:
    """`nccl_check` while the host's hardware has the fault (hardware.json's "faults"), cleared after."""
    edit_hardware(host, f"h.setdefault('faults', {{}})[{fault!r}]={value!r}")
    try:
        return nccl_check(inventory, *arguments)
    finally:
        edit_hardware(host, f"h['faults'].pop({fault!r})")


def test_the_fabric_tools_deploy_converges(fleet):
    again = pyinfra("--json", "deploys/gpu_host.py", inventory=fleet)
    assert again.returncode == 0, again.stderr[-3000:]
    changed = [op["name"] for op in json.loads(again.stdout)["results"]["operations"] if op["success"]]
    assert changed == []


def test_the_fabric_tools_pass_their_host_checks(fleet):
    checked = host_checks(fleet, checks="tests/hosts/test_nccl_tests.py")
    assert checked.returncode == 0, checked.stdout[-3000:]


def test_a_healthy_fleet_passes_and_every_host_keeps_its_result(fleet):
    status, found = nccl_check(fleet, "--baseline")
    assert status == 0 and found["passed"], found
    measured = found["baseline"]["h200x8"]  # what a fleet pastes into group data as nccl_baseline
    assert set(measured) == {"host_all_reduce", "cluster_all_reduce", "cluster_alltoall"}
    assert measured["host_all_reduce"] == round(found["hosts"]["gpu-01"]["tests"][0]["busbw"], 1)
    for name in HOSTS:
        result = found["hosts"][name]
        assert result["verdict"] == "pass" and result["driver"] == "580.126.09"
        figures = {test["test"]: test for test in result["tests"]}
        assert set(figures) == {"host_all_reduce", "cluster_all_reduce", "cluster_alltoall"}
        assert all(test["busbw"] >= test["threshold"] for test in figures.values())
        kept = json.loads(on_host(name, "cat /var/lib/k3ops/fabric/last-check.json").stdout)
        assert kept["verdict"] == "pass" and kept["cluster"]["members"] == sorted(
            other for other, group in {**GROUPS, "gpu-01": "h200-a", "gpu-02": "h200-a"}.items()
            if group == (GROUPS.get(name) or "h200-a"))
    status_rows = json.loads(k3ops("nccl", "status", fleet, "--json").stdout)
    assert {row["host"]: row["verdict"] for row in status_rows} == dict.fromkeys(HOSTS, "pass")


FAULTS = {
    "a NIC port down": ("h['nics'][2]['port_state']='Down'", "rdma_ports: mlx5_2 port 1: Down/Polling"),
    "a link at a lower rate": ("h['nics'][5]['rate_gbps']=200", "rdma_ports: mlx5_5 port 1: 200 Gb/s"),
    "NVLinks down": ("h.setdefault('faults', {})['nvlink_down_links']={'3': [0, 1, 2]}",
                     "host_all_reduce on gpu-04: fail: slow"),
    "a GPU off the bus": ("h['gpus'][5]['fallen_off_bus']=True", "gpus: 7 GPUs visible, the spec names 8"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_fails_the_check_and_names_the_host_and_cause(fleet, fault):
    change, reason = FAULTS[fault]
    on_host("gpu-04", f"cp {HARDWARE} /root/hardware.json.healthy")
    edit_hardware("gpu-04", change)
    try:
        status, found = nccl_check(fleet, "--limit", "gpu-03,gpu-04")
    finally:
        on_host("gpu-04", f"cp /root/hardware.json.healthy {HARDWARE}")
    assert status == 1 and not found["passed"]
    assert any(reason in line for line in found["hosts"]["gpu-04"]["reasons"]), found["hosts"]["gpu-04"]["reasons"]
    assert all("gpu-04" in line for line in found["hosts"]["gpu-03"]["reasons"])  # gpu-03 fails only through it
    assert any(test["reason"].startswith("not run: gpu-04") for test in found["hosts"]["gpu-03"]["tests"])


def test_a_host_serving_is_not_tested(fleet):
    on_host("gpu-03", "systemd-run --unit k3ops-engine.service sleep 600")  # stands in for a serving engine
    try:
        status, found = nccl_check(fleet, "--limit", "gpu-03,gpu-04")
    finally:
        on_host("gpu-03", "systemctl stop k3ops-engine.service")
    assert status == 1
    assert found["hosts"]["gpu-03"]["reasons"][0].startswith("idle: k3ops-engine.service is running")
    assert not any(test["test"] == "host_all_reduce" for test in found["hosts"]["gpu-03"]["tests"])


def test_without_gpudirect_rdma_the_host_is_named(fleet):
    on_host("gpu-04", "rm -rf /sys/module/nvidia_peermem")  # the module gone, as after a boot without it
    try:
        status, found = nccl_check(fleet, "--limit", "gpu-03,gpu-04")
    finally:
        on_host("gpu-04", "modprobe nvidia-peermem")
    assert status == 1
    assert any(line.startswith("gpudirect_rdma: nvidia-peermem is not loaded")
               for line in found["hosts"]["gpu-04"]["reasons"])


def test_a_slow_host_that_looks_healthy_is_found_by_pairs(fleet):
    status, found = check_with_fault(fleet, "gpu-04", "nic_throughput_share", 0.5)
    assert status == 1
    assert all(check["passed"] for check in found["hosts"]["gpu-04"]["prechecks"])  # nothing shows but speed
    assert found["localization"]["h200-b"]["at_fault"] == ["gpu-04"]
    assert found["localization"]["h200-b"]["cleared"] == ["gpu-03"]
    assert len(found["localization"]["h200-b"]["rounds"]) == 1
    assert found["hosts"]["gpu-04"]["at_fault"] and not found["hosts"]["gpu-03"]["at_fault"]
    assert all(found["hosts"][name]["verdict"] == "pass" for name in HOSTS if name not in ("gpu-03", "gpu-04"))


def test_without_a_known_good_host_the_slow_one_is_found_alone_through_its_nics(fleet):
    """Only the pair is checked (a fleet of one cluster): no reference to pair with, so each host runs
    all_reduce with peer access and shared memory off, every byte through its own NICs."""
    status, found = check_with_fault(fleet, "gpu-04", "nic_throughput_share", 0.5, "--limit", "gpu-03,gpu-04")
    assert status == 1
    located = found["localization"]["h200-b"]
    assert (located["rounds"], located["at_fault"], located["cleared"]) == ([], ["gpu-04"], ["gpu-03"])
    assert located["nic_loopback"] == [["gpu-03", True], ["gpu-04", False]]
    assert "located at fault in h200-b's failure" in found["hosts"]["gpu-04"]["reasons"]


def test_a_host_whose_nccl_ports_do_not_answer_hangs_its_tests_and_is_named(fleet, tmp_path):
    """A firewall on gpu-04 drops NCCL's bootstrap connections (SSH and MPI's launch still work): NCCL retries
    for over an hour, so the check's time limit ends the test, reports a hang, kills what it left on every
    host, skips the cluster's next test and finds the host by pairs, each of which it also ends."""
    short = lab_inventory(tmp_path / "short.py", per_host=PER_HOST, nccl_timeout_seconds=30)
    status, found = check_with_fault(short, "gpu-04", "bootstrap_unreachable", True)
    assert status == 1
    across = [test for test in found["hosts"]["gpu-04"]["tests"] if test["hosts"] == ["gpu-03", "gpu-04"]]
    assert [(test["test"], test["verdict"]) for test in across] == [("cluster_all_reduce", "hang"),
                                                                     ("cluster_alltoall", "fail")]
    assert across[0]["reason"].startswith("did not finish within 30 s")
    assert across[1]["reason"] == "not run: cluster_all_reduce hung"
    assert found["localization"]["h200-b"]["at_fault"] == ["gpu-04"]
    for name in HOSTS:
        assert on_host(name, "pgrep -u k3ops-nccl", check=False).returncode == 1, f"test processes left on {name}"


CLUSTER_LIMIT = ("--limit", "gpu-01", "--limit", "gpu-02")


def plan(inventory: str, *arguments: str) -> str:
    """pyinfra's detected changes for the whole stack on the cluster, declined at its prompt: nothing runs."""
    command = [word for word in pyinfra_command(*arguments, *CLUSTER_LIMIT, "deploys/k3.py", inventory=inventory)
               if word != "-y"]
    shown = subprocess.run(command, input="n\n", capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    return shown.stdout + shown.stderr


def test_the_engine_cluster_starts_only_after_a_passing_check(fleet):
    """The containers cannot run in the lab (issue 17's VMs): after a passing check pyinfra's plan shows the
    engine starting on both hosts; after a failed one the real deploy stops before it changes anything."""
    model = pyinfra(*CLUSTER_LIMIT, "deploys/model.py", inventory=fleet)
    assert model.returncode == 0, model.stdout[-3000:]
    edit_hardware("gpu-02", "h['nics'][0]['port_state']='Down'")
    try:
        assert nccl_check(fleet, "--limit", "gpu-01,gpu-02")[0] == 1
    finally:
        edit_hardware("gpu-02", "h['nics'][0]['port_state']='Active'")
    refused = pyinfra(*CLUSTER_LIMIT, "deploys/k3.py", inventory=fleet)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "cluster 'h200-a' will not start" in output
    assert "mlx5_0 port 1: Down/Polling" in output or "not run: gpu-02 failed a pre-check" in output
    assert "k3ops nccl check INVENTORY --limit gpu-01,gpu-02" in output and "--data nccl_gate=off" in output
    assert on_host("gpu-01", "test -e /etc/systemd/system/k3ops-engine.service", check=False).returncode == 1
    engine_starts = re.compile(r"Engine vllm \(vllm-h200x8-2node\)\s+2 \(gpu-01, gpu-02\)")
    assert engine_starts.search(plan(fleet, "--data", "nccl_gate=off"))  # the override the message names

    assert nccl_check(fleet, "--limit", "gpu-01,gpu-02")[0] == 0
    shown = plan(fleet)
    assert "will not start" not in shown
    assert engine_starts.search(shown), shown[-4000:]
    older = plan(fleet, "--data", "nvidia_driver_version=580.105.08")  # a driver change: the check must run again
    assert "ran on 580.126.09, not the driver it runs now (580.105.08)" in older
