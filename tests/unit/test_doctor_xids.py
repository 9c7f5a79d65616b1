"""The Xid catalogue names what to do about every Xid the real kernel-log captures hold."""

import pytest

from k3ops.doctor.xids import CATALOGUE_URL, UNKNOWN_XID, XID_CATALOGUE, classify
from k3ops.facts.kernel_log import KernelXidEvents

from ..conftest import REAL_FIXTURES, real_output

CAPTURES = sorted(path.name for path in (REAL_FIXTURES / "kernel-xid").glob("*.txt"))


def xids_in(capture: str) -> set[int]:
    return {event["xid"] for event in KernelXidEvents().process(real_output(f"kernel-xid/{capture}").splitlines())}


def test_the_captures_hold_the_xids_they_are_named_for():
    found = set().union(*(xids_in(capture) for capture in CAPTURES))
    assert found == {13, 31, 43, 45, 48, 63, 64, 79, 94, 109, 119, 120, 145, 149, 154}


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_captured_xid_is_in_the_catalogue(capture):
    for xid in xids_in(capture):
        assert classify(xid) is XID_CATALOGUE[xid]


@pytest.mark.parametrize("xid", [13, 31, 43])
def test_application_xids_leave_the_host_alone(xid):
    entry = classify(xid)
    assert (entry.kind, entry.action) == ("application", "none")


def test_fallen_off_the_bus_needs_a_reboot():
    entry = classify(79)
    assert (entry.kind, entry.severity, entry.action) == ("hardware", "critical", "reboot")


@pytest.mark.parametrize("xid", [0, 999, 171])
def test_an_unknown_xid_is_treated_as_hardware_to_inspect(xid):
    entry = classify(xid)
    assert entry.code == xid
    assert (entry.severity, entry.action, entry.source) == ("warning", "drain and inspect hardware", CATALOGUE_URL)
    assert (entry.meaning, entry.kind) == (UNKNOWN_XID.meaning, UNKNOWN_XID.kind)


def test_each_entry_is_filed_under_its_own_code_and_cites_nvidia():
    for code, entry in XID_CATALOGUE.items():
        assert entry.code == code
        assert entry.source.startswith(CATALOGUE_URL)
