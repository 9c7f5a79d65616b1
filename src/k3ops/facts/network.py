"""Facts about the host's network services: what listens where."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

# One line of `ss -Hltn`: state, receive and send queues, local address:port, peer address:port.
SS_LISTEN_REGEX = r"^LISTEN\s+\d+\s+\d+\s+(?P<address>\S+):(?P<port>\d+)\s"


class ListeningAddresses(FactBase[list[str]]):
    """
    Returns the local addresses with a TCP socket listening on a port (IPv6 without brackets,
    ``*`` or ``0.0.0.0``/``::`` for every address):

    .. code:: python

        ["10.213.7.11"]
    """

    @override
    def command(self, port: int):
        return f"ss -Hltn sport = :{int(port)}"

    @override
    def requires_command(self, port: int) -> str:
        return "ss"

    default = list

    @override
    def process(self, output):
        return [listening["address"].strip("[]") for line in output if (listening := re.match(SS_LISTEN_REGEX, line))]
