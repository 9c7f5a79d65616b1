"""A unit's journal is read only for a plain unit name, a positive line count and a start time: all go into a
shell command."""

import pytest

from k3ops.facts.journal import UnitJournal


@pytest.mark.parametrize("unit", ["nvidia-fabricmanager.service", "k3ops-model-fetch@kimi-k3.service",
                                  "getty@tty1.service"])
def test_a_unit_name_goes_into_the_command_as_given(unit):
    assert UnitJournal().command(unit, 50) == f"journalctl -u {unit} -b -q -o short-iso --no-pager -n 50 || true"


def test_since_reads_from_the_units_last_start():
    assert UnitJournal().command("k3ops-engine.service", 50, since=1796147786) == (
        "journalctl -u k3ops-engine.service -b --since=@1796147786 -q -o short-iso --no-pager -n 50 || true")


@pytest.mark.parametrize("unit", ["", "k3ops-engine", "k3ops-engine.service; reboot", "k3ops engine", "$(reboot)",
                                  "-n", "--no-pager", "k3ops-engine\n", "k3ops*", "dev-disk-by\\x2duuid.device", None])
def test_anything_else_is_refused(unit):
    with pytest.raises(ValueError, match="not a systemd unit name"):
        UnitJournal().command(unit, 50)


@pytest.mark.parametrize("lines", [0, -5, True, "50", 2.5])
def test_the_line_count_must_be_a_positive_number(lines):
    with pytest.raises(ValueError, match="lines must be a positive whole number"):
        UnitJournal().command("k3ops-engine.service", lines)


@pytest.mark.parametrize("since", [0, -1, "@1796147786; reboot", 1.5])
def test_the_start_time_must_be_a_positive_number(since):
    with pytest.raises(ValueError, match="since must be a positive whole number"):
        UnitJournal().command("k3ops-engine.service", 50, since=since)
