"""A group's way through a rolling upgrade, in one place: its states, the record of a group, the step each state
runs (steps.py registers each with `serves`) and one table of each state's edges. rollout.py drives a group along
them; steps.py does the work on the hosts.

A step may be cut off anywhere (a controller dies, `abort`): each one runs again from its own start and does only
what is left, so a controller that died in a state resumes in that same state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import NotRequired, TypedDict


class State(StrEnum):
    """A group's state, as its rollout records it (the values are the record's words)."""

    PENDING = "pending"
    DRAINING = "draining"
    STOPPED = "stopped"
    UPGRADING = "upgrading"
    REBOOTING = "rebooting"
    VALIDATING = "validating"
    SOAKING = "soaking"
    DONE = "done"
    FAILED = "failed"  # taken out of service, marked failed: a person looks, `resume` retries
    HELD = "held"  # someone else took a host out of service: never touched, never re-admitted


# A group as its rollout's record keeps it (JSON, read back by the next controller): the keys every group has,
# then what steps add on the way ("from": each host's driver before, for a rollback; "before": each host's boot
# and module before the deploy, the proof of its reboot; "deploy": the running deploy's pid and start).
Group = TypedDict("Group", {
    "name": str, "hosts": list[str], "canary": bool, "state": State, "to": str, "failures": int,
    "detail": NotRequired[str], "since": NotRequired[str], "since_epoch": NotRequired[float],
    "history": NotRequired[list], "failed_at": NotRequired[State], "rolled_back_from": NotRequired[str],
    "from": NotRequired[dict[str, str]], "before": NotRequired[dict[str, list]], "deploy": NotRequired[dict],
    "marked": NotRequired[str]})
GROUP_KEYS = tuple(sorted(Group.__required_keys__))


@dataclass(frozen=True)
class Edges:
    """Where a group goes from one state."""

    success: State | None  # its step done (pending: chosen for a batch and staged)
    failure: State | None  # its step failed
    resume: State  # where a controller that died in it resumes (the next `resume`)
    retry: State | None  # where `resume` takes up a group that failed in it
    abort: State  # where `abort` leaves it
    hold: State | None  # a host someone else took out of service before it started
    out_of_service: bool  # its hosts do not serve (deregistered, stopped or not yet back)


TRANSITIONS: dict[State, Edges] = {
    State.PENDING: Edges(State.DRAINING, State.FAILED, State.PENDING, State.PENDING, State.PENDING, State.HELD,
                         False),
    State.DRAINING: Edges(State.STOPPED, State.FAILED, State.DRAINING, State.DRAINING, State.DRAINING, None, True),
    State.STOPPED: Edges(State.UPGRADING, State.FAILED, State.STOPPED, State.STOPPED, State.STOPPED, None, True),
    State.UPGRADING: Edges(State.REBOOTING, State.FAILED, State.UPGRADING, State.UPGRADING, State.UPGRADING, None,
                           True),
    State.REBOOTING: Edges(State.VALIDATING, State.FAILED, State.REBOOTING, State.REBOOTING, State.REBOOTING, None,
                           True),
    State.VALIDATING: Edges(State.SOAKING, State.FAILED, State.VALIDATING, State.VALIDATING, State.VALIDATING, None,
                            True),
    # It serves again, but keeps its slot until it is done, so that one failing its soak never takes the fleet past
    # the budget. Its failure stopped the engine: the retry's validation starts it.
    State.SOAKING: Edges(State.DONE, State.FAILED, State.SOAKING, State.VALIDATING, State.SOAKING, None, False),
    State.DONE: Edges(None, None, State.DONE, None, State.DONE, None, False),
    State.FAILED: Edges(None, None, State.FAILED, None, State.FAILED, None, True),  # retried at its `retry`
    State.HELD: Edges(None, None, State.PENDING, None, State.HELD, None, False),  # looked at again by `resume`
}
# A pending group whose hosts already run the release and serve: nothing to do.
ALREADY_THERE = State.DONE
# A failed canary that data wants rolled back (upgrade_rollback_failed_canary) goes through the steps from its stop
# to its old driver; `resume` takes it up again from its drain, to the rollout's driver.
ROLLED_BACK_AT, RETRIED_AFTER_ROLLBACK = State.STOPPED, State.DRAINING

OUT_OF_SERVICE = frozenset(state for state, edges in TRANSITIONS.items() if edges.out_of_service)
# The states with a step: a group in one is in a batch, and keeps its slot until done or failed.
IN_FLIGHT = frozenset({State.DRAINING, State.STOPPED, State.UPGRADING, State.REBOOTING, State.VALIDATING,
                       State.SOAKING})

# The step each in-flight state runs: step(run, group) -> what it did, in words; it raises to fail the group.
Step = Callable[..., str]
STEPS: dict[State, Step] = {}


def serves(state: State) -> Callable[[Step], Step]:
    """Register a step as the one `state` runs."""
    def register(step: Step) -> Step:
        STEPS[state] = step
        return step
    return register


def retried_at(group: Group) -> State:
    """Where `resume` takes up a failed or held group."""
    if group["state"] == State.HELD:
        return TRANSITIONS[State.HELD].resume
    if "rolled_back_from" in group:
        return RETRIED_AFTER_ROLLBACK
    return TRANSITIONS[State(group.get("failed_at", State.PENDING))].retry
