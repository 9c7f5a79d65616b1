"""Facts read from the systemd journal: what a unit logged in the current boot."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

from .kernel_log import ISO_TIME_REGEX
from .units import UNIT_NAME_REGEX

# The journal's prefix before each message: the time (`-o short-iso` 2025-01-05T14:44:41+0000, or syslog's
# "Jan 05 14:44:41" of the plain short format), the host and the identifier with its pid when it has one
# ("nv-fabricmanager[1120]: ", "kernel: ").
JOURNAL_PREFIX_REGEX = (
    rf"^(?:{ISO_TIME_REGEX}|\w{{3}} [ \d]\d \d{{2}}:\d{{2}}:\d{{2}})"
    r" \S+ [^\s\[:]+(?:\[\d+\])?: "
)


class UnitJournal(FactBase[list[str]]):
    """
    Returns the last ``lines`` messages a unit logged in the current boot (``since``: from that Unix time
    on, the unit's last start, so that an earlier run's errors are not taken for this one's), oldest first,
    without the journal's time, host and process prefix:

    .. code:: python

        ["Detected Pre-NVL5 system", "Connected to 1 node."]
    """

    @override
    def command(self, unit: str, lines: int, since: int | None = None):
        if not isinstance(unit, str) or not re.fullmatch(UNIT_NAME_REGEX, unit):
            raise ValueError(f"not a systemd unit name: {unit!r}")
        for name, value in (("lines", lines), ("since", since)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        window = f" --since=@{since}" if since else ""
        # A host without a journal (or one k3ops may not read) has nothing to say, which is no failure.
        return f"journalctl -u {unit} -b{window} -q -o short-iso --no-pager -n {lines} || true"

    default = list

    @override
    def process(self, output):
        return [re.sub(JOURNAL_PREFIX_REGEX, "", line) for line in output]
