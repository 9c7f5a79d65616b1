"""Checkpoint operations: get a pinned revision active on the host's model cache."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from k3ops.facts.checkpoint import ModelCheckpoints
from k3ops.onhost.layout import FETCH_UNIT_TEMPLATE, instance

JOURNAL_LINES = 40


@operation()
def active_revision(model: str, revision: str, cache_path: str):
    """
    Make ``revision`` the active, verified revision of a model, by running its fetch unit.

    The fetch runs as a systemd oneshot, so a download of hours survives a lost SSH session; a rerun
    of the deploy waits on the same job. When it fails, its journal is shown.

    + model: the model's name (its cache directory and unit instance)
    + revision: the pinned commit sha
    + cache_path: the model cache's mount point

    **Example:**

    .. code:: python

        checkpoint.active_revision(model="kimi-k3", revision="0123...cdef", cache_path="/srv/k3ops/models")
    """

    state = host.get_fact(ModelCheckpoints, cache_path=cache_path).get(model, {})
    if state.get("active") == revision and revision in state.get("installed", []) and not state.get("bad_files"):
        host.noop(f"{model} {revision} is active and verified")
        return
    unit = QuoteString(instance(FETCH_UNIT_TEMPLATE, model))
    yield StringCommand("systemctl", "start", unit, "||", "{", "journalctl", "--unit", unit, "--lines",
                        str(JOURNAL_LINES), "--no-pager", "--output", "cat", ">&2;", "exit", "1;", "}")
