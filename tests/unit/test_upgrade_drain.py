"""A drain ends only when every serving host shows nothing running or waiting on two samples in a row, or at its
deadline: a host whose metrics cannot be read is not idle, and one quiet sample between two requests is not the
end. A host's requests in flight are read from facts' values, as tests/unit/test_doctor.py reads its checks."""

from __future__ import annotations

import pytest

from k3ops.facts.engine import EngineMetrics
from k3ops.facts.units import UnitStates
from k3ops.onhost.layout import ENGINE_UNIT
from k3ops.upgrade.steps import Drain, Soak, in_flight

from .test_doctor import ENGINE, MODEL, FactHost


def outcome(*samples: dict, deadline: float = 100.0) -> tuple[str | None, int]:
    """The drain's verdict after these samples (one a second from 0), and how many it took."""
    watch = Drain(deadline=deadline)
    for taken, sample in enumerate(samples, 1):
        verdict = watch.sample(sample, float(taken))
        if verdict:
            return verdict, taken
    return None, len(samples)


def test_two_quiet_samples_in_a_row_end_it():
    assert outcome({"gpu-01": 0, "gpu-02": 0.0}, {"gpu-01": 0, "gpu-02": 0}) == ("no request running or waiting", 2)


def test_one_quiet_sample_between_requests_does_not():
    assert outcome({"gpu-01": 0}, {"gpu-01": 1}, {"gpu-01": 0}) == (None, 3)


def test_an_unreadable_engine_is_never_taken_for_an_idle_one():
    assert outcome({"gpu-01": None}, {"gpu-01": None}, {"gpu-01": None}) == (None, 3)
    verdict, _ = outcome({"gpu-01": None, "gpu-02": 0}, deadline=0.5)
    assert verdict.startswith("drain timed out with requests in flight ({'gpu-01': 'unknown'})")


def test_requests_in_flight_hold_it_until_the_deadline():
    verdict, taken = outcome({"gpu-01": 2.0}, {"gpu-01": 1.0}, {"gpu-01": 1.0}, deadline=2.5)
    assert taken == 3 and "{'gpu-01': 1.0}" in verdict and "the engine's own stop drains the rest" in verdict


def host(active: str, sub: str = "running", **metrics) -> FactHost:
    page = {"requests_running": None, "requests_waiting": None, "kv_cache_usage": None, **metrics}
    return FactHost({UnitStates: {ENGINE_UNIT: {"active": active, "sub": sub}}, EngineMetrics: page})


@pytest.mark.parametrize(("engine", "expected"), [
    (host("active", requests_running=1.0, requests_waiting=3.0), 4.0),  # waiting requests count
    (host("active", requests_running=0.0, requests_waiting=0.0), 0.0),
    (host("active"), None),  # the page unreadable or slow: unknown, not idle
    (host("active", requests_running=0.0), None),  # half a page says nothing of the queue
    (host("deactivating", requests_running=2.0, requests_waiting=0.0), 2.0),  # stopping: still finishing
    (host("inactive", "dead"), 0),
    (host("activating", "auto-restart"), 0),  # between two crashes: nothing runs
    (host("failed", "failed"), 0),
])
def test_in_flight_reads_running_and_waiting_and_never_guesses(engine, expected):
    assert in_flight(engine, {"hardware_profile": "h200x8", "engine": ENGINE, "model": MODEL}) == expected


def test_a_soak_forgives_a_miss_or_two_and_fails_on_misses_in_a_row():
    watch = Soak(max_misses=3)
    samples = [{"gpu-01": None, "gpu-02": "health timed out"}, {"gpu-01": None, "gpu-02": None},  # a blip
               {"gpu-01": "connection refused", "gpu-02": None}, {"gpu-01": "connection refused", "gpu-02": None}]
    assert [watch.sample(sample) for sample in samples] == [None] * 4
    assert watch.sample({"gpu-01": "connection refused", "gpu-02": None}) == \
        "gpu-01: connection refused (3 checks in a row)"
    assert Soak(max_misses=1).sample({"gpu-01": "not ready"}) == "gpu-01: not ready (1 checks in a row)"
