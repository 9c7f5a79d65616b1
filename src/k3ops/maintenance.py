"""The maintenance marker a rollout (or a person) leaves on a host while taking it out of service, and how long
it is to be believed.

A marker names its owner (`by`; a rollout's also its id and controller) and a deadline. While the deadline
holds, someone is working on the host and the doctor holds its findings back. Past it, nobody is: a controller
that died, a rollout aborted and forgotten, a person who never came back. A marker whose state is `failed` is a
host a rollout took out of service on purpose. The doctor reports both (runbooks/host-left-in-maintenance.md)
instead of staying silent for ever, and a deploy never starts an engine on a marked host.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta, timezone

from .onhost.layout import MAINTENANCE_LOCK, MAINTENANCE_MARKER

MARKER_BY = "k3ops upgrade"  # a rollout's markers; a marker by anyone else is a person's drain
LIVE, STALE, FAILED = "live", "stale", "failed"
# A marker without a deadline of its own (a person's, or one from an older k3ops) is believed this long after
# its `since`: a day's work, after which the doctor asks someone to look.
UNDATED_MARKER_HOURS = 24
RUNBOOK = "host-left-in-maintenance"
CHANGED_STATUS = 3  # compare_and_set's exit status when the marker is no longer the one read
LOCK_WAIT_SECONDS = 60


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def marker(reason: str, state: str, since: str, deadline_seconds: float | None, **fields: str) -> dict:
    """A marker as a rollout writes it: a `failed` one has no deadline (it waits for a person)."""
    if deadline_seconds is None:
        deadline = None
    else:
        deadline = iso(datetime.now(timezone.utc) + timedelta(seconds=deadline_seconds))
    return {"reason": reason, "by": MARKER_BY, "state": state, "since": since, "deadline": deadline, **fields}


def moment(text) -> datetime | None:
    """An ISO 8601 time read from a marker (one without a zone is UTC), or None."""
    try:
        found = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)


def standing(found: dict, at: datetime | None = None) -> tuple[str, str]:
    """Whether a marker read from a host is LIVE, STALE or FAILED, and why in words."""
    if found.get("state") == FAILED:
        return FAILED, f"a rollout took it out of service and failed: {found.get('detail') or found.get('reason', '?')}"
    deadline = moment(found.get("deadline"))
    if deadline is None and found.get("deadline") is None and (since := moment(found.get("since"))) is not None:
        deadline = since + timedelta(hours=UNDATED_MARKER_HOURS)
    if deadline is None:
        return STALE, "its deadline cannot be read, so nobody can be said to be working on it"
    if (at or datetime.now(timezone.utc)) > deadline:
        return STALE, f"its deadline {iso(deadline)} has passed: nobody is working on it"
    return LIVE, f"until {iso(deadline)}"


def owner(found: dict) -> str:
    """Who left the marker, in words: `k3ops upgrade (rollout ID from CONTROLLER)` or a person's `by`."""
    words = found.get("by", "?")
    if found.get("rollout"):
        words += f" (rollout {found['rollout']} from {found.get('controller', '?')})"
    return words


def foreign(found: dict | None, rollouts: set[str]) -> bool:
    """A marker none of `rollouts` wrote (a rollout's own id, and those it took over by name): a person's, or
    another rollout's (a failed host it left for a person to look at, or one another controller works on)."""
    return found is not None and (found.get("by") != MARKER_BY or found.get("rollout") not in (None, *rollouts))


def compare_and_set(read: dict | None, command: str, marker_path: str = MAINTENANCE_MARKER,
                    lock: str = MAINTENANCE_LOCK) -> str:
    """`command` (a marker's write or removal) run only if the host's marker is still the one a controller read
    and judged its own (`read`, None: no marker), by its rollout id, under a lock every controller takes: two
    controllers that read the same marker cannot both take the host. It exits CHANGED_STATUS otherwise."""
    if read is None:
        still = f"! test -e {shlex.quote(marker_path)}"
    elif read.get("rollout") is None:
        still = f"test -e {shlex.quote(marker_path)} && ! grep -qF '\"rollout\":' {shlex.quote(marker_path)}"
    else:
        words = json.dumps({"rollout": read["rollout"]})[1:-1]  # as json.dumps writes the marker's key
        still = f"grep -qF {shlex.quote(words)} {shlex.quote(marker_path)}"
    body = (f"if {still}; then {command}; else echo 'the maintenance marker changed since it was read' >&2; "
            f"exit {CHANGED_STATUS}; fi")
    return (f"mkdir -p {shlex.quote(lock.rsplit('/', 1)[0])} && flock -w {LOCK_WAIT_SECONDS} {shlex.quote(lock)} "
            f"sh -c {shlex.quote(body)}")
