"""A plain deploy that would switch a serving host to another model revision together with other hosts of the
model is refused before anything runs: every engine would restart onto the new weights at once, and `k3ops
upgrade model` moves a group at a time instead."""

from __future__ import annotations

import pytest

from k3ops.deploys.checkpoint import switch_refusal

OLD, NEW = "0123456789abcdef0123456789abcdef01234567", "89abcdef" * 5


@pytest.mark.parametrize(("active", "serving", "together"), [
    (NEW, True, ["gpu-02"]),  # already there
    (None, True, ["gpu-02"]),  # the first fetch: nothing to switch from
    (OLD, False, ["gpu-02"]),  # not serving: a dark fleet may switch at once
    (OLD, True, []),  # one host alone (--limit): how a rollout's group moves
])
def test_a_deploy_goes_on_where_no_serving_host_switches_together_with_others(active, serving, together):
    assert switch_refusal("gpu-01", "kimi-k3", active, NEW, serving, together) is None


def test_a_serving_host_switching_with_others_is_refused_with_the_command_to_use():
    message = switch_refusal("gpu-01", "kimi-k3", OLD, NEW, True, ["gpu-02", "gpu-03"])
    assert message.startswith(f"gpu-01: serves kimi-k3 {OLD}") and "together with gpu-02, gpu-03" in message
    assert f"`k3ops upgrade model INVENTORY --to {NEW}`" in message and "model_switch_together = True" in message
