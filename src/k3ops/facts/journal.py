"""Facts read from the systemd journal: what a unit logged in the current boot."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

# A unit name ("nvidia-fabricmanager.service", "getty@tty1.service"): systemd's characters but the "\"
# of its escapes, and no leading "-", so that neither the shell nor journalctl's options read it.
UNIT_NAME_REGEX = r"[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,255}"
# The journal's prefix before each message: the time (`-o short-iso` 2025-01-05T14:44:41+0000, or syslog's
# "Jan 05 14:44:41" of the plain short format), the host and the identifier with its pid when it has one
# ("nv-fabricmanager[1120]: ", "kernel: ").
JOURNAL_PREFIX_REGEX = (
    r"^(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?|\w{3} [ \d]\d \d{2}:\d{2}:\d{2})"
    r" \S+ [^\s\[:]+(?:\[\d+\])?: "
)


class UnitJournal(FactBase[list[str]]):
    """
    Returns the last ``lines`` messages a unit logged in the current boot, oldest first, without the
    journal's time, host and process prefix:

    .. code:: python

        ["Detected Pre-NVL5 system", "Connected to 1 node."]
    """

    @override
    def command(self, unit: str, lines: int):
        if not isinstance(unit, str) or not re.fullmatch(UNIT_NAME_REGEX, unit):
            raise ValueError(f"not a systemd unit name: {unit!r}")
        if isinstance(lines, bool) or not isinstance(lines, int) or lines <= 0:
            raise ValueError(f"lines must be a positive number of lines, not {lines!r}")
        # A host without a journal (or one k3ops may not read) has nothing to say, which is no failure.
        return f"journalctl -u {unit} -b -q -o short-iso --no-pager -n {lines} || true"

    default = list

    @override
    def process(self, output):
        return [re.sub(JOURNAL_PREFIX_REGEX, "", line) for line in output]
