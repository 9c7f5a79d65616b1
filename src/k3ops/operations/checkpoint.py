"""Checkpoint operations: get a pinned revision active on the host's model cache."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from k3ops.facts.checkpoint import ModelCheckpoints

FETCH_UNIT = "k3ops-model-fetch@{name}.service"
JOURNAL_LINES = 40
EXIT_CGROUP = 219


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
    unit = FETCH_UNIT.format(name=model)
    # Exit status 219 (EXIT_CGROUP): systemd could not put the process in the unit's cgroup, so the fetch
    # never ran; seen in the lab (a cgroup v1 container) right after the unit's previous run. One retry.
    yield StringCommand(
        f"systemctl start {unit} || "
        f"{{ [ \"$(systemctl show --property ExecMainStatus --value {unit})\" = {EXIT_CGROUP} ] && sleep 2 && "
        f"systemctl start {unit}; }} || "
        f"{{ journalctl --unit {unit} --lines {JOURNAL_LINES} --no-pager --output cat >&2; exit 1; }}")
