"""The rollout's state machine (k3ops.upgrade.machine) is whole: every state has its edges, every in-flight state
its step, and the edges lead a group along its way from pending to done."""

from __future__ import annotations

from k3ops.upgrade import steps  # noqa: F401  (registers the steps)
from k3ops.upgrade.machine import (IN_FLIGHT, OUT_OF_SERVICE, STEPS, TRANSITIONS, State, retried_at)


def test_every_state_has_its_edges_and_every_in_flight_state_its_step():
    assert set(TRANSITIONS) == set(State)
    assert set(STEPS) == IN_FLIGHT
    assert all(edges.failure == State.FAILED for state, edges in TRANSITIONS.items() if state in IN_FLIGHT)


def test_success_leads_from_pending_through_every_in_flight_state_to_done():
    way, state = [], State.PENDING
    while state is not None:
        way.append(state)
        state = TRANSITIONS[state].success
    assert way[0] == State.PENDING and way[-1] == State.DONE and set(way[1:-1]) == IN_FLIGHT


def test_a_dead_controller_resumes_where_it_was_and_abort_leaves_a_group_there():
    """Each step runs again from its own start (tests/unit/test_upgrade_chaos.py kills a controller in each)."""
    assert all(TRANSITIONS[state].resume == state and TRANSITIONS[state].abort == state for state in IN_FLIGHT)


def test_groups_that_do_not_serve_are_those_stopped_or_not_yet_back():
    assert OUT_OF_SERVICE == {State.DRAINING, State.STOPPED, State.UPGRADING, State.REBOOTING, State.VALIDATING,
                              State.FAILED}


def test_resume_takes_up_a_failed_group_where_its_engine_can_come_back_and_looks_at_a_held_one_again():
    group = {"name": "a", "hosts": ["gpu-01"], "canary": False, "to": "580.126.09", "failures": 1}
    assert retried_at({**group, "state": State.FAILED, "failed_at": State.SOAKING}) == State.VALIDATING
    assert retried_at({**group, "state": State.FAILED, "failed_at": State.UPGRADING}) == State.UPGRADING
    assert retried_at({**group, "state": State.FAILED, "failed_at": State.PENDING}) == State.PENDING  # staging
    assert retried_at({**group, "state": State.FAILED, "failed_at": State.VALIDATING,
                       "rolled_back_from": "580.126.09"}) == State.DRAINING
    assert retried_at({**group, "state": State.HELD}) == State.PENDING
