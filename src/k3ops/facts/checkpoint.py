"""Facts about the checkpoints on a host's model cache, as the host-side store reports them."""

from __future__ import annotations

import json

from pyinfra.api import FactBase, QuoteString
from pyinfra.api.command import make_formatted_string_command
from typing_extensions import override

CHECKPOINT_COMMAND = "/usr/local/sbin/k3ops-checkpoint"


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
        return make_formatted_string_command(
            f"if [ -x {CHECKPOINT_COMMAND} ]; then {CHECKPOINT_COMMAND} status {{0}}; else echo '{{{{}}}}'; fi",
            QuoteString(cache_path))

    @override
    def process(self, output):
        return json.loads("\n".join(output) or "{}")
