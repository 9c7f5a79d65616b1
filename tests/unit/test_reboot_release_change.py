"""A plain deploy that would move a serving host to another driver release (NVIDIA's, or a ROCm release and its
amdgpu) is refused before anything runs: it would reboot every host it runs on at once, and `k3ops upgrade`
drains a group at a time instead."""

from __future__ import annotations

import pytest
from pyinfra.api import DeployError
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

from k3ops.deploys.reboot import refuse_release_change_while_serving
from k3ops.onhost.layout import ENGINE_UNIT


def refused(running: str | None, engine_running: bool) -> str | None:
    state = FakeState()
    facts = {"systemd.SystemdStatus": {ENGINE_UNIT: engine_running}}
    host = create_host(state, facts=facts)
    host.name = "mi-01"  # create_host names it after its last fact
    with ctx_state.use(state), ctx_host.use(host):
        try:
            refuse_release_change_while_serving(running, "7.1.0", "ROCm", "rocm_release", "rocm")
        except DeployError as error:
            return str(error)
    return None


@pytest.mark.parametrize(("running", "engine_running"), [
    ("7.1.0", True),  # already there
    (None, True),  # no amdgpu loaded: nothing serves on it
    ("7.0.2", False),  # not serving: the deploy may reboot it
])
def test_a_deploy_goes_on_where_no_serving_host_moves(running, engine_running):
    assert refused(running, engine_running) is None


def test_a_serving_host_on_another_release_is_refused_with_the_command_to_use():
    message = refused("7.0.2", True)
    assert message is not None and message.startswith("mi-01: runs ROCm 7.0.2 and serves")
    assert "`k3ops upgrade rocm INVENTORY --to 7.1.0`" in message and "rocm_release = '7.0.2'" in message
