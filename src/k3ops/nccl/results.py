"""The fabric check's result on each host, written where the serving deploy's gate (k3ops.fabric_gate) and
`k3ops nccl status` read it back (the LastFabricCheck fact).

Each checked host keeps its last result in layout.FABRIC_CHECK_RESULT (JSON: when, on which driver and
NCCL/RCCL, every figure and verdict).
"""

from __future__ import annotations

from ..onhost import layout
from ..owned_files import replace_with


def write_command(document: str) -> str:
    """Replace the host's result in one rename, so a reader never sees half of it."""
    return replace_with(layout.FABRIC_CHECK_RESULT, f"{document}\n", "644")
