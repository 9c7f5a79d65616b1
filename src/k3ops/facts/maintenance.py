"""The maintenance marker a rollout or a person leaves on a host while it is out of service (k3ops.maintenance)."""

from __future__ import annotations

import json

from pyinfra.api import FactBase
from typing_extensions import override

from k3ops.onhost.layout import MAINTENANCE_MARKER

PRESENT = "k3ops-marker-present"


class MaintenanceMarker(FactBase[dict | None]):
    """
    Returns the host's maintenance marker (``None`` when there is no marker file):

    .. code:: python

        {"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "state": "draining",
         "since": "2026-12-01T14:02:11+00:00", "deadline": "2026-12-01T14:32:11+00:00",
         "rollout": "5f0c2a91d3e4b6a7", "controller": "ops@bastion-1", "group": "gpu-01"}
    """

    command = f"if test -e {MAINTENANCE_MARKER}; then echo {PRESENT}; cat {MAINTENANCE_MARKER}; fi"

    @override
    def process(self, output):
        if not output or output[0] != PRESENT:
            return None
        text = "\n".join(output[1:]).strip()
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        # A marker that is empty or cannot be read still says someone took the host out of service.
        return found if isinstance(found, dict) else {"reason": f"unreadable marker: {text[:80]!r}"}
