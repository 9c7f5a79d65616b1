"""The apt lists are refreshed whatever their age once an apt source or pin operation before the refresh changed
something, and by age alone when none did; a plan asks whether each source would change."""

from __future__ import annotations

from datetime import datetime

from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

from k3ops.operations import packages

REFRESH = " || ".join(["timeout --kill-after=10 300 apt-get update"] * 3)
FRESH_LISTS = {"files.File": {"path=/var/lib/apt/periodic/update-success-stamp": {"mtime": datetime(2025, 1, 1, 1, 30)}},
               "server.Date": datetime(2025, 1, 1, 2, 0)}


def source(changed: bool | None, would_change: bool | None = None) -> OperationMeta:
    """A source operation that ran (changed or not), or one still planned (changed None) that would change."""
    meta = OperationMeta("a-source", is_change=would_change)
    if changed is not None:
        meta.set_complete(True, ["a command"] if changed else [], None)
    return meta


def planned(*sources: OperationMeta) -> list[str]:
    state = FakeState()
    with ctx_state.use(state), ctx_host.use(create_host(state, facts=FRESH_LISTS)):
        return [str(command) for command in packages.update._inner(cache_time=3600, sources=list(sources))]


def test_a_changed_source_refreshes_fresh_lists():
    assert planned(source(False), source(True)) == [REFRESH, "touch /var/lib/apt/periodic/update-success-stamp"]


def test_unchanged_sources_leave_fresh_lists_alone():
    assert planned(source(False), source(False)) == planned() == []


def test_a_plan_refreshes_when_a_source_would_change():
    assert planned(source(None, would_change=True))[0] == REFRESH
    assert planned(source(None, would_change=False)) == []
