"""Notice a host that stops answering: SSH keepalives plus the kernel's TCP time limits on one connection.

An SSH keepalive alone only queues a packet; it is the TCP user timeout (unacknowledged data older than
the limit aborts the connection) that turns silence into an error, which paramiko raises to the command
waiting on it. Used by pyinfra's connections in a deploy and by k3ops' own (checks, status commands).
"""

from __future__ import annotations

import socket

from .spec.connection import ConnectionSpec


def keep_alive(transport, spec: ConnectionSpec) -> None:
    """Keepalives every `ssh_keepalive_seconds`; the connection fails after `ssh_lost_after_seconds` unanswered."""
    transport.set_keepalive(spec.ssh_keepalive_seconds)
    sock = transport.sock
    if not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # a ProxyCommand or jump host's channel: the connection to the first hop carries the limits
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, spec.ssh_keepalive_seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, spec.ssh_keepalive_seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT,
                    max(1, spec.ssh_lost_after_seconds // spec.ssh_keepalive_seconds))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, spec.ssh_lost_after_seconds * 1000)


def watch_connection(host) -> None:
    """Put the limits of the host's data on its pyinfra SSH connection (other connectors have none to set)."""
    from pyinfra.connectors.ssh import SSHConnector

    client = getattr(host.connector, "client", None) if isinstance(host.connector, SSHConnector) else None
    transport = client.get_transport() if client is not None else None
    if transport is not None:
        keep_alive(transport, ConnectionSpec.model_validate(host.data.dict()))
