"""A rollout's groups, budget and batches: what moves together and how much may be out at once."""

import pytest

from k3ops.upgrade.plan import Group, batches, budget, engine_groups, next_batch, oversized

DIGEST = "sha256:" + "a" * 64
H200 = {"hardware_profile": "h200x8"}
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}


def clustered(cluster: str) -> dict:
    return {**H200, "model": MODEL,
            "engine": {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": cluster}}


def test_an_engine_cluster_is_one_group_in_rank_order_and_a_lone_host_its_own():
    hosts = [("gpu-01", H200), ("gpu-02", clustered("a")), ("gpu-03", H200), ("gpu-04", clustered("a"))]
    assert engine_groups(hosts) == [Group("gpu-01", ("gpu-01",)), Group("a", ("gpu-02", "gpu-04")),
                                    Group("gpu-03", ("gpu-03",))]


@pytest.mark.parametrize(("given", "hosts", "allowed"), [("1", 8, 1), ("3", 2, 3), ("25%", 8, 2), ("30%", 8, 2),
                                                         ("100%", 4, 4)])
def test_the_budget_is_hosts_or_a_share_rounded_down(given, hosts, allowed):
    assert budget(given, hosts) == allowed


@pytest.mark.parametrize(("given", "message"), [
    ("0", "--max-unavailable: 0 would never let a host out"), ("10%", "10% of 4 hosts is no host at all"),
    ("150%", "not a percentage between 1% and 100%"), ("two", "'two' is not a number of hosts or a percentage"),
    ("-1", "is not a number of hosts")])
def test_a_budget_that_lets_nothing_move_or_means_nothing_is_refused(given, message):
    with pytest.raises(ValueError, match=message):
        budget(given, 4)


def test_a_group_larger_than_the_budget_is_named():
    groups = [Group("a", ("gpu-01", "gpu-02")), Group("gpu-03", ("gpu-03",))]
    assert oversized(groups, 1) == ["engine group a (gpu-01, gpu-02) has 2 hosts, more than --max-unavailable "
                                    "allows out of service at once (1)"]
    assert oversized(groups, 2) == []


def test_canaries_go_alone_then_batches_fill_the_budget_in_order():
    groups = [Group(f"g{index}", (f"h{index}",)) for index in range(5)]
    assert [[group.name for group in batch] for batch in batches(groups, 1, 2)] == [["g0"], ["g1", "g2"], ["g3", "g4"]]
    assert [[group.name for group in batch] for batch in batches(groups, 0, 5)] == [["g0", "g1", "g2", "g3", "g4"]]


def test_a_batch_stops_at_the_first_group_that_does_not_fit():
    queue = [Group("a", ("h1",)), Group("b", ("h2", "h3")), Group("c", ("h4",))]
    assert next_batch(queue, 2) == [queue[0]]  # c would fit, but does not jump ahead of b
    assert next_batch(queue, 0) == []


def test_a_groups_own_hosts_already_out_take_no_more_room():
    """A budget of one host with that host out (a failed group retried) still lets its group move: counted once."""
    queue = [Group("gpu-01", ("gpu-01",)), Group("h200-a", ("gpu-02", "gpu-03"))]
    assert next_batch(queue, 0, {"gpu-01"}) == [queue[0]]
    assert next_batch(queue[1:], 1, {"gpu-02"}) == [queue[1]]  # one of its two hosts out: one more host of room
    assert next_batch(queue, 0, {"gpu-09"}) == []  # someone else's host out: no room for anyone


def test_a_multi_node_engine_with_one_host_out_is_out_whole():
    from k3ops.upgrade.rollout import out_of_service

    groups = [{"name": "h200-a", "hosts": ["gpu-01", "gpu-02"]}, {"name": "gpu-03", "hosts": ["gpu-03"]}]
    seen = {"gpu-01": {"out": "engine not ready: connection refused"}, "gpu-02": {"out": None},
            "gpu-03": {"out": None}}
    assert out_of_service(groups, seen) == {"gpu-01": "engine not ready: connection refused",
                                            "gpu-02": "its engine group h200-a does not serve"}


def test_the_hosts_that_count_against_the_budget_are_those_serving_the_same_model():
    """A rollout limited to some hosts still counts the others of the service when they are out."""
    from k3ops.upgrade.rollout import served_model

    assert served_model(clustered("h200-a")) == "kimi-k3"
    assert served_model(H200) is None  # serves nothing: its being out costs the service nothing
    assert served_model({**H200, "model": MODEL}) is None  # holds the model, runs no engine
