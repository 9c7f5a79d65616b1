"""A unit's journal is read only for a plain unit name and a positive line count: both go into a shell command."""

import pytest

from k3ops.facts.journal import UnitJournal


@pytest.mark.parametrize("unit", ["nvidia-fabricmanager.service", "k3ops-engine", "getty@tty1.service"])
def test_a_unit_name_goes_into_the_command_as_given(unit):
    assert UnitJournal().command(unit, 50) == f"journalctl -u {unit} -b -q -o short-iso --no-pager -n 50 || true"


@pytest.mark.parametrize("unit", ["", "k3ops-engine; reboot", "k3ops engine", "$(reboot)", "-n", "--no-pager",
                                  "k3ops-engine\n", "k3ops*", "dev-disk-by\\x2duuid.device", None])
def test_anything_else_is_refused(unit):
    with pytest.raises(ValueError, match="not a systemd unit name"):
        UnitJournal().command(unit, 50)


@pytest.mark.parametrize("lines", [0, -5, True, "50", 2.5])
def test_the_line_count_must_be_a_positive_number(lines):
    with pytest.raises(ValueError, match="lines must be a positive number"):
        UnitJournal().command("k3ops-engine.service", lines)
