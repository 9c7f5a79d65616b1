"""Facts the fabric check reads and leaves: the host's SSH host key (for the run's known_hosts), and the
result of the last check on the host (for the engine's gate, and for later commands)."""

from __future__ import annotations

import json
import re

from pyinfra.api import FactBase
from typing_extensions import override

from ..onhost import layout

HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"
HOST_KEY_REGEX = r"^(?P<key>ssh-ed25519 [A-Za-z0-9+/=]+)"


class SshHostKey(FactBase[str | None]):
    """
    Returns the host's ed25519 SSH host key, as known_hosts lists it:

    .. code:: python

        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG3k..."
    """

    command = f"cat {HOST_KEY} 2>/dev/null || true"

    @override
    def process(self, output):
        found = re.match(HOST_KEY_REGEX, output[0].strip()) if output else None
        return found["key"] if found else None


class LastFabricCheck(FactBase[dict | None]):
    """
    Returns the last fabric check's result on the host (``None`` when it was never checked):

    .. code:: python

        {"time": "2026-12-01T14:02:11+00:00", "verdict": "pass", "driver": "580.126.09",
         "cluster": {"name": "h200-a", "members": ["gpu-01", "gpu-02"], "verdict": "pass"}, "tests": [...]}
    """

    command = f"cat {layout.FABRIC_CHECK_RESULT} 2>/dev/null || true"

    @override
    def process(self, output):
        try:
            found = json.loads("\n".join(output))
        except ValueError:
            return None  # cut short (a full disk): as good as no result, which the gate refuses
        return found if isinstance(found, dict) else None
