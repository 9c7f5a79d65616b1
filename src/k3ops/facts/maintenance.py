"""The maintenance marker a rollout leaves on a host while it works on it."""

from __future__ import annotations

import json

from pyinfra.api import FactBase
from typing_extensions import override

from k3ops.onhost.layout import MAINTENANCE_MARKER


class MaintenanceMarker(FactBase[dict | None]):
    """
    Returns the host's maintenance marker (``None`` when the host is not under maintenance):

    .. code:: python

        {"reason": "driver upgrade to 580.126.09", "since": "2026-12-01T14:02:11+00:00", "by": "k3ops upgrade"}
    """

    command = f"cat {MAINTENANCE_MARKER} 2>/dev/null || true"

    @override
    def process(self, output):
        text = "\n".join(output).strip()
        if not text:
            return None
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        # A marker that cannot be read still says someone is working on the host.
        return found if isinstance(found, dict) else {"reason": f"unreadable marker: {text[:80]}"}
