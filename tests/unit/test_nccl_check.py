"""The fabric check's decisions without hosts: thresholds, the data that sets them, verdicts on real reports,
the localization's rounds, the command lines' quoting and the engine's gate."""

import shlex

import pytest
from pydantic import ValidationError

from k3ops.nccl import launch
from k3ops.nccl.localize import localize
from k3ops.fabric_gate import gate_refusal
from k3ops.nccl.thresholds import PUBLISHED, threshold
from k3ops.settings.fabric import TEST_KINDS
from k3ops.nccl.verdict import FabricRun, judge
from k3ops.settings import host_errors
from k3ops.settings.fabric import FabricCheckSpec
from k3ops.settings.host import GpuHostSpec

from ..conftest import real_output

H100_2NODE = "nccl-tests/01_nccl_allreduce_h100_2node_16gpu.txt"
EIGHT_GIB = 8 << 30


def test_every_gpu_board_says_for_every_test_who_published_its_figure_or_why_nobody_has():
    from k3ops.hardware import BOARD_PROFILES

    for name, board in BOARD_PROFILES.items():
        if board.gpu_model is not None:
            assert set(PUBLISHED[name]) == set(TEST_KINDS), name
            for kind, figure in PUBLISHED[name].items():
                assert figure.source and (figure.gbps is None) == figure.source.startswith("no "), (name, kind)


def test_thresholds_checked_against_the_published_figures():
    """H200 shares H100's NVLink 4 (healthy 478-480): Azure's H100 floor, not its H200 one 10% under healthy;
    NIC loopback is Azure's 40 on NDR, alltoall ROCm CVS's 45; B300 and GB300 have no published figure."""
    assert threshold("h200x8", "host_all_reduce", {}, {}, 0.9)[0] == threshold("h100x8", "host_all_reduce", {}, {},
                                                                                0.9)[0] == 460.0
    assert threshold("h200x8", "host_nic_loopback", {}, {}, 0.9)[0] == 40.0
    assert {threshold(profile, "cluster_alltoall", {}, {}, 0.9)[0] for profile in ("h200x8", "mi355x8")} == {45.0}
    for profile, kind in (("b300x8", "host_all_reduce"), ("gb300x4", "host_all_reduce"),
                          ("gb200x4", "cluster_alltoall"), ("gb300x4", "cluster_all_reduce")):
        figure, source = threshold(profile, kind, {}, {}, 0.9)
        assert figure is None and "k3ops nccl check INVENTORY --baseline" in source, (profile, kind)
    assert threshold("b300x8", "host_all_reduce", {}, {"host_all_reduce": 950.0}, 0.9) == (855.0, "0.9 x nccl_baseline")


def test_the_fleet_overrides_then_its_baseline_then_the_published_figure():
    figure, source = threshold("h200x8", "host_all_reduce", {}, {}, 0.9)
    assert figure == 460.0 and source.startswith("published: Azure NHC nd96isr_h100_v5.conf")
    assert threshold("h200x8", "host_all_reduce", {}, {"host_all_reduce": 480.0}, 0.9) == (432.0, "0.9 x nccl_baseline")
    assert threshold("h200x8", "host_all_reduce", {"host_all_reduce": 300.0}, {"host_all_reduce": 480.0}, 0.9) == (
        300.0, "nccl_thresholds")


@pytest.mark.parametrize(("data", "message"), [
    ({"nccl_thresholds": {"all_reduce": 400}}, "'all_reduce' is not a test"),
    ({"nccl_baseline": {"host_all_reduce": -1}}, "is not a bandwidth"),
    ({"nccl_environment": {"LD_PRELOAD": "/tmp/x.so"}}, "'LD_PRELOAD' is not an NCCL"),
    ({"nccl_environment": {"NCCL_IB_HCA": "mlx5\nExecStart=/bin/sh"}}, "line break"),
    ({"nccl_bootstrap_interface": "eth0; reboot"}, "is not a network interface"),
    ({"nccl_tests_version": "latest"}, "is not a package version"),
    ({"nccl_gate": "maybe"}, "nccl_gate"),
])
def test_bad_fabric_data_names_the_host_and_field(data, message):
    errors = host_errors("gpu-07", {"hardware_profile": "h200x8", **data})
    assert any(error.startswith("gpu-07: ") and message in error for error in errors), errors


def test_a_hostile_nccl_setting_reaches_mpirun_as_one_argument():
    fabric = FabricCheckSpec(nccl_environment={"NCCL_IB_HCA": "=mlx5_0:1,$(reboot) `id` 'x\""})
    words = shlex.split(launch.across_hosts("all_reduce", "nvidia", 8, ["10.0.0.1", "10.0.0.2"], fabric))
    assert "NCCL_IB_HCA==mlx5_0:1,$(reboot) `id` 'x\"" in words
    assert words[words.index("--host") + 1] == "10.0.0.1:1,10.0.0.2:1"
    assert words[:3] == ["timeout", "--kill-after=10", "600"]


def run_at(threshold_figure):
    return FabricRun(test="cluster_all_reduce", hosts=["a", "b"], size_bytes=EIGHT_GIB, threshold=threshold_figure,
                   threshold_source="published")


def test_a_real_report_is_judged_at_the_target_size_not_by_the_footer_average():
    output = real_output(H100_2NODE)
    passed = judge(run_at(300.0), 0, output, "", 600)
    assert (passed.verdict, passed.busbw) == ("pass", 337.35)  # the lower of in-place and out-of-place
    slow = judge(run_at(340.0), 0, output, "", 600)
    assert slow.verdict == "fail" and "337.35 GB/s is below 340" in slow.reason


def test_a_cut_report_a_timeout_and_wrong_values_fail():
    output = real_output(H100_2NODE)
    cut = output[:output.index("# Out of bounds")]
    assert judge(run_at(300.0), 0, cut, "", 600).reason == "report ended early"
    hung = judge(run_at(300.0), 124, cut + "gpu-02:1:1 [0] NCCL WARN NET/IB : Got async event : port error\n", "", 600)
    assert hung.verdict == "hang" and "within 600 s" in hung.reason and "port error" in hung.reason
    wrong = output.replace("47535  180.71  338.82      0", "47535  180.71  338.82      3")
    assert judge(run_at(300.0), 0, wrong, "", 600).reason.startswith("3 wrong values")


def slow_hosts(bad):
    """A round runner: a pair passes unless one of its hosts is bad."""
    rounds = []

    def run_pairs(pairs):
        rounds.append(pairs)
        for a, b in pairs:
            assert len({a, b}) == 2
        hosts = [host for pair in pairs for host in pair]
        assert len(hosts) == len(set(hosts)), "a host in two pairs of one round"
        return [a not in bad and b not in bad for a, b in pairs]

    return run_pairs, rounds


def test_a_slow_host_is_named_in_one_round_beside_references():
    run_pairs, rounds = slow_hosts({"gpu-04"})
    found = localize(["gpu-03", "gpu-04"], ["gpu-01", "gpu-02", "gpu-05", "gpu-06"], run_pairs)
    assert (found.at_fault, sorted(found.cleared), found.undecided, len(rounds)) == (["gpu-04"], ["gpu-03"], [], 1)


def test_without_references_pairs_of_suspects_find_them_in_a_constant_number_of_rounds():
    hosts = [f"gpu-{i:02d}" for i in range(1, 9)]
    run_pairs, rounds = slow_hosts({"gpu-06"})
    found = localize(hosts, [], run_pairs)
    assert found.at_fault == ["gpu-06"] and not found.undecided and len(rounds) == 2
    run_pairs, rounds = slow_hosts({"gpu-02", "gpu-07"})
    found = localize(hosts, [], run_pairs)
    assert sorted(found.at_fault) == ["gpu-02", "gpu-07"] and len(rounds) == 2


def test_two_suspects_with_no_reference_stay_undecided_without_rerunning_their_pair():
    run_pairs, rounds = slow_hosts({"gpu-02"})
    found = localize(["gpu-01", "gpu-02"], [], run_pairs, failed=[("gpu-01", "gpu-02")])
    assert (found.at_fault, found.undecided, rounds) == ([], ["gpu-01", "gpu-02"], [])


H200 = GpuHostSpec(hardware_profile="h200x8", nvidia_driver_version="580.126.09")
PASSED = {"time": "2026-12-01T10:00:00+00:00", "verdict": "pass", "driver": "580.126.09", "reasons": [],
          "cluster": {"name": "h200-a", "members": ["gpu-01", "gpu-02"], "verdict": "pass"}}


def test_the_gate_passes_only_a_passing_check_of_the_same_cluster_on_the_current_driver():
    members = ["gpu-01", "gpu-02"]
    assert gate_refusal("gpu-01", "h200-a", members, H200, PASSED) is None
    never = gate_refusal("gpu-01", "h200-a", members, H200, None)
    assert "no fabric check has run" in never and "k3ops nccl check INVENTORY --limit gpu-01,gpu-02" in never
    assert "--data nccl_gate=off" in never
    failed = {**PASSED, "verdict": "fail", "reasons": ["rdma_ports: mlx5_3 port 1: Down/Polling"],
              "cluster": {**PASSED["cluster"], "verdict": "fail"}}
    assert "failed: rdma_ports: mlx5_3 port 1: Down/Polling" in gate_refusal("gpu-01", "h200-a", members, H200, failed)
    older = {**PASSED, "driver": "580.105.08"}
    assert "ran on 580.105.08, not the driver it runs now (580.126.09)" in gate_refusal(
        "gpu-01", "h200-a", members, H200, older)
    regrouped = gate_refusal("gpu-01", "h200-a", ["gpu-01", "gpu-03"], H200, PASSED)
    assert "did not test cluster 'h200-a' as gpu-01, gpu-03" in regrouped


def test_an_unknown_profile_figure_is_not_invented():
    figure, source = threshold("cpu", "host_all_reduce", {}, {}, 0.9)
    assert figure is None and source.startswith("no figure for hardware_profile 'cpu'")
    with pytest.raises(ValidationError):
        FabricCheckSpec(nccl_message_gib=0)


@pytest.mark.parametrize(("ib_hca", "device", "port", "used"), [
    (None, "mlx5_8", 1, True),
    ("mlx5", "mlx5_10", 1, True),
    ("=mlx5_1", "mlx5_10", 1, False),
    ("=mlx5_1", "mlx5_1", 1, True),
    ("mlx5_0:1,mlx5_1:1", "mlx5_1", 2, False),
    ("^mlx5_8", "mlx5_8", 1, False),
    ("^mlx5_8", "mlx5_3", 1, True),
    ("^=mlx5_bond_0", "mlx5_bond_0", 1, False),
])
def test_the_ports_checked_are_the_ones_nccl_ib_hca_lets_nccl_use(ib_hca, device, port, used):
    from k3ops.nccl.prechecks import hca_selected

    assert hca_selected(ib_hca, device, port) is used


class Answers:
    """Fact values as a host would give them (the facts themselves are tested on real captures)."""

    def __init__(self, values):
        self.values = values

    def get_fact(self, fact, **arguments):
        return self.values[fact.__name__]


def ports(*states):
    return [{"device": f"mlx5_{index}", "port": 1, "state": state, "physical_state": physical, "rate_gbps": rate,
             "link_layer": "InfiniBand"} for index, (state, physical, rate) in enumerate(states)]


HEALTHY_PORT = ("Active", "LinkUp", 400)


def test_a_front_end_port_is_no_fault_but_a_fabric_port_down_is_named():
    from k3ops.nccl.prechecks import rdma_ports

    front_end = ports(*[HEALTHY_PORT] * 8, ("Active", "LinkUp", 100))
    checks = rdma_ports(Answers({"InfinibandPorts": front_end, "InfinibandActiveMtu": {}}), H200, None)
    assert all(check.passed for check in checks)
    one_down = ports(*[HEALTHY_PORT] * 2, ("Down", "Polling", 10), *[HEALTHY_PORT] * 5)
    found = rdma_ports(Answers({"InfinibandPorts": one_down, "InfinibandActiveMtu": {"mlx5_0": 4096, "mlx5_1": 2048}}),
                       H200, None)
    assert found[0].problems == ("mlx5_2 port 1: Down/Polling", "7 healthy RDMA ports, hardware_profile 'h200x8' has 8")
    assert found[1].problems == ("active MTUs differ: mlx5_0 4096, mlx5_1 2048",)


def test_a_port_at_half_the_rate_of_the_hosts_others_is_named_on_a_board_faster_than_its_profile():
    """B300 boards ship ConnectX-8 at 800 Gb/s; the profile's 400 would pass a port that trained at half that."""
    from k3ops.nccl.prechecks import rdma_ports

    connectx8 = ports(*[("Active", "LinkUp", 800)] * 7, ("Active", "LinkUp", 400))
    found = rdma_ports(Answers({"InfinibandPorts": connectx8, "InfinibandActiveMtu": {}}), H200, None)
    assert found[0].problems == ("mlx5_7 port 1: 400 Gb/s, the board's ports link at 800",
                                 "7 healthy RDMA ports, hardware_profile 'h200x8' has 8")
    every = ports(*[("Active", "LinkUp", 800)] * 8)
    assert rdma_ports(Answers({"InfinibandPorts": every, "InfinibandActiveMtu": {}}), H200, None)[0].passed
