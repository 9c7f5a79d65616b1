"""Notice a host that stops answering, and let it fail alone.

The kernel's TCP keepalives probe an idle connection and its TCP user timeout aborts one whose data goes
unacknowledged: either way the SSH transport's read fails with ETIMEDOUT, an OSError, which pyinfra treats
as that host's failure. Paramiko's own keepalive is left off: its send fails first and paramiko reports
that as EOFError, which pyinfra does not expect and which would end the whole run.

pyinfra also ends the run on any error raised while a host's deploy code runs (its facts are read then),
so a top-level deploy is `watched`: a connection error there fails that host alone, as does an error
that follows from the default facts pyinfra returns for a host it has already failed. The same holds
while the operations run: pyinfra generates an operation's commands again then, reading facts anew after
earlier operations changed the host, and an error there ends the whole run (pyinfra catches connection
errors only around a command); `watched` makes such an error fail that host alone too.
"""

from __future__ import annotations

import functools
import logging
import socket

from paramiko import SSHException
from pyinfra import host

from .settings import host_settings
from .settings.connection import ConnectionSpec

CONNECTION_ERRORS = (OSError, EOFError, SSHException)
logger = logging.getLogger("pyinfra")


def keep_alive(transport, spec: ConnectionSpec) -> None:
    """Probes after `ssh_keepalive_seconds` idle; the connection fails after `ssh_lost_after_seconds` unanswered."""
    sock = transport.sock
    if not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a ProxyCommand or jump host's channel: the connection to the first hop carries the limits
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, spec.ssh_keepalive_seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, spec.ssh_keepalive_seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT,
                    max(1, spec.ssh_lost_after_seconds // spec.ssh_keepalive_seconds))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, spec.ssh_lost_after_seconds * 1000)


def watch_connection(target) -> None:
    """Put the limits of the host's data on its pyinfra SSH connection (other connectors have none to set)."""
    from pyinfra.connectors.ssh import SSHConnector

    client = getattr(target.connector, "client", None) if isinstance(target.connector, SSHConnector) else None
    transport = client.get_transport() if client is not None else None
    if transport is not None:
        keep_alive(transport, host_settings(target).connection)


def run_host_op_failing_alone(run_host_op):
    """pyinfra's run of one operation on one host, where a connection lost while the operation reads its facts
    fails that host (a False result, as for a failed command) instead of ending the run."""
    @functools.wraps(run_host_op)
    def run(state, current, op_hash):
        try:
            return run_host_op(state, current, op_hash)
        except CONNECTION_ERRORS as error:
            current.log_styled(f"Error: connection lost while an operation read its facts ({type(error).__name__}: "
                               f"{error}); this host fails, the others go on", fg="red", log_func=logger.error)
            return False
    run.fails_alone = True
    return run


def fail_alone_while_operations_run() -> None:
    """Put run_host_op_failing_alone in place of pyinfra's own, once per process."""
    from pyinfra.api import operations

    if not getattr(operations.run_host_op, "fails_alone", False):
        operations.run_host_op = run_host_op_failing_alone(operations.run_host_op)


def watched(deploy_function):
    """A top-level deploy whose host, lost while its deploy code or its operations run, fails alone and the
    others go on."""
    @functools.wraps(deploy_function)
    def run(*args, **kwargs):
        current = host._get_module()  # the host itself, not pyinfra's context proxy
        if current in current.state.failed_hosts:
            return None  # lost already (in an earlier deploy of this run): nothing more to ask it
        fail_alone_while_operations_run()
        watch_connection(current)
        try:
            return deploy_function(*args, **kwargs)
        except Exception as error:
            already_failed = current in current.state.failed_hosts
            if not (already_failed or isinstance(error, CONNECTION_ERRORS)):
                raise
            if not already_failed:
                current.log_styled(f"Error: connection lost ({type(error).__name__}: {error}); this host fails, "
                                   "the others go on", fg="red", log_func=logger.error)
                current.state.fail_hosts({current})
            return None
    return run
