"""A top-level deploy whose host is lost while its deploy code or its operations run fails that host alone:
the run's other hosts go on; an error on a host still answering still stops the run, as pyinfra would."""

import socket

import pytest
from pyinfra import host
from pyinfra.api import Config, Inventory, State, operation
from pyinfra.api import operations as pyinfra_operations
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import add_op
from pyinfra.context import ctx_host, ctx_state

from k3ops.settings.connection import ConnectionSpec
from k3ops.ssh_liveness import fail_alone_while_operations_run, keep_alive, watched


@pytest.fixture
def fleet():
    inventory = Inventory((["gpu-01", "gpu-02"], {}))
    state = State(inventory, Config())
    state.active_hosts = set(inventory)
    state.activated_hosts = set(inventory)
    with ctx_state.use(state):
        yield state, inventory.get_host("gpu-01")


def run_on(host, function):
    with ctx_host.use(host):
        return watched(function)()


def test_a_lost_connection_fails_only_its_host(fleet):
    state, lost = fleet
    def deploy_code():
        raise EOFError()
    assert run_on(lost, deploy_code) is None
    assert state.failed_hosts == {lost} and [h.name for h in state.active_hosts] == ["gpu-02"]


def test_an_error_after_pyinfra_failed_the_host_stays_that_hosts(fleet):
    """pyinfra fails a host whose fact command broke and hands the deploy the fact's default; a DeployError
    the deploy then raises from that default is no reason to stop the other hosts."""
    state, lost = fleet
    def deploy_code():
        state.fail_hosts({lost})
        raise DeployError("gpu-01: hardware_profile 'h200x8' has NVSwitches but lspci shows none")
    assert run_on(lost, deploy_code) is None
    assert state.failed_hosts == {lost}


def test_a_deploy_error_on_a_host_still_answering_stops_the_run(fleet):
    _, healthy = fleet
    def deploy_code():
        raise DeployError("gpu-01: bad data")
    with pytest.raises(DeployError):
        run_on(healthy, deploy_code)


def test_a_host_lost_in_an_earlier_deploy_is_not_asked_again(fleet):
    state, lost = fleet
    state.fail_hosts({lost})
    asked = []
    assert run_on(lost, lambda: asked.append(True)) is None and asked == []


@operation()
def reads_its_facts_again():
    """As pyinfra's operations do when they run: their commands are made again, from facts read anew."""
    if host.state.is_executing and host.name == "gpu-01":
        raise EOFError()  # paramiko, asked for a channel on a transport that died
    host.noop("nothing to change")
    yield from ()


def test_a_host_lost_while_an_operation_reads_its_facts_fails_alone(fleet, monkeypatch):
    state, lost = fleet
    monkeypatch.setattr(pyinfra_operations, "run_host_op", pyinfra_operations.run_host_op)  # undone after
    for member in state.inventory:
        member.connected = True  # nothing is run on them: the operation has no command
    fail_alone_while_operations_run()
    add_op(state, reads_its_facts_again)
    pyinfra_operations.run_ops(state)
    assert state.failed_hosts == {lost} and [h.name for h in state.active_hosts] == ["gpu-02"]


class Transport:
    def __init__(self, sock):
        self.sock = sock


def test_the_connection_gives_up_after_the_datas_limit():
    spec = ConnectionSpec(ssh_keepalive_seconds=10, ssh_lost_after_seconds=60)
    with socket.socket() as sock:
        keep_alive(Transport(sock), spec)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 6
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 60_000
