"""Facts about the checkpoints on a host's model cache, as the host-side store reports them."""

from __future__ import annotations

import json

from pyinfra.api import FactBase, QuoteString, StringCommand
from typing_extensions import override

from k3ops.onhost.layout import CHECKPOINT_COMMAND


class ModelCheckpoints(FactBase[dict[str, dict]]):
    """
    Returns each model in the cache with its active revision, the revisions on disk, the last
    verification and the fetch in progress (``{}`` before the store is installed):

    .. code:: python

        {"kimi-k3": {"active": "3f0c...", "installed": ["3f0c..."], "phase": "active", "bad_files": [],
                     "bytes_done": 594000000000, "bytes_total": 594000000000, "free_bytes": 2100000000000}}
    """

    default = dict

    @override
    def command(self, cache_path: str):
        return StringCommand(CHECKPOINT_COMMAND, "status", QuoteString(cache_path))

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return CHECKPOINT_COMMAND

    @override
    def process(self, output):
        return json.loads("\n".join(output) or "{}")
