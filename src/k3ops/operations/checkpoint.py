"""Checkpoint operations: get a pinned revision active on the host's model cache."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from k3ops.facts.checkpoint import ModelCheckpoints
from k3ops.onhost.layout import FETCH_UNIT_TEMPLATE, instance

JOURNAL_LINES = 40


@operation()
def active_revision(model: str, revision: str, cache_path: str, activate: bool = True):
    """
    Make ``revision`` the active, verified revision of a model, by running its fetch unit; or, with
    ``activate=False`` (a rollout's staging), installed and verified beside the active revision, which keeps
    serving.

    The fetch runs as a systemd oneshot, so a download of hours survives a lost SSH session; a rerun
    of the deploy waits on the same job. When it fails, its journal is shown.

    + model: the model's name (its cache directory and unit instance)
    + revision: the pinned commit sha
    + cache_path: the model cache's mount point
    + activate: make it the active revision (the fetch settings the deploy wrote say the same)

    **Example:**

    .. code:: python

        checkpoint.active_revision(model="kimi-k3", revision="0123...cdef", cache_path="/srv/k3ops/models")
    """

    state = host.get_fact(ModelCheckpoints, cache_path=cache_path).get(model, {})
    verified = revision in state.get("installed", []) and not (state.get("active") == revision
                                                                and state.get("bad_files"))
    if verified and state.get("active") == revision:
        host.noop(f"{model} {revision} is active and verified")
        return
    if verified and not activate:
        host.noop(f"{model} {revision} is staged and verified beside the active {state.get('active')}")
        return
    unit = QuoteString(instance(FETCH_UNIT_TEMPLATE, model))
    yield StringCommand("systemctl", "start", unit, "||", "{", "journalctl", "--unit", unit, "--lines",
                        str(JOURNAL_LINES), "--no-pager", "--output", "cat", ">&2;", "exit", "1;", "}")
