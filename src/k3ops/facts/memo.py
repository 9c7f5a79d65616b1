"""Facts read once per host for as long as nothing has changed on that host.

pyinfra 3 asks the host again at every `host.get_fact`: a no-change rerun of the GPU host deploy listed the
installed packages 11 times and the holds 5 times, one SSH round trip each. A fact read through `remembered` is
asked again only once an operation on that host has run commands since the last read (any operation: it may
have installed, held or started what the fact reports), so a rerun that changes nothing asks once, and a first
deploy asks as often as before. A plan (a run without -y, before its confirmation) reads apart from the execution.
"""

from __future__ import annotations

from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from pyinfra.api import FactBase
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.server import Command

from .reader import MISSING_COMMAND_MARKER, fact_command

T = TypeVar("T")

# host -> (fact, its arguments) -> (the host's changes when it was read, the value read)
_READ: WeakKeyDictionary[Any, dict[tuple, tuple[int, Any]]] = WeakKeyDictionary()
SECTION_MARK = "k3ops-fact-section"


def changes_on_host() -> int:
    """How many of the current host's operations have run commands so far (the deploy's changes there).
    A state that records no operations (pyinfra's test harness plans one operation alone) has seen none."""
    operations = getattr(ctx_state.get(), "ops", {}).get(ctx_host.get(), {})
    return sum(1 for data in operations.values() if data.operation_meta.executed)


def remembered(fact: type[FactBase[T]], **kwargs) -> T:
    """The fact's value on the current host, asked again only once the host may have changed since.
    Callers must not change the value they are given: the next caller is given the same object."""
    read, key, changes = _entry(fact, kwargs)
    if key not in read or read[key][0] != changes:
        read[key] = (changes, ctx_host.get().get_fact(fact, **kwargs))
    return read[key][1]


def read_together(*facts: type[FactBase] | tuple[type[FactBase], dict]) -> None:
    """Ask the current host these facts (a class, or a class and its arguments) in one command, and remember each
    answer for `remembered`: a deploy asks up front what its parts then ask one at a time. A fact whose command
    fails or whose tool is missing is left out, to be asked alone (and handled as pyinfra handles it)."""
    asked = [item if isinstance(item, tuple) else (item, {}) for item in facts]
    sections = []
    for index, (fact, kwargs) in enumerate(asked):
        sections.append(f"echo {SECTION_MARK}; ({fact_command(fact(), **kwargs)}) 2>/dev/null; "
                        f"echo {SECTION_MARK} {index} $?")
    output = ctx_host.get().get_fact(Command, command="; ".join(sections)) or ""
    lines: list[str] = []
    for line in output.split("\n"):
        if line == SECTION_MARK:
            lines = []
        elif line.startswith(f"{SECTION_MARK} "):
            index, status = (int(word) for word in line.split()[1:3])
            if status == 0 and lines != [MISSING_COMMAND_MARKER]:
                fact, kwargs = asked[index]
                read, key, changes = _entry(fact, kwargs)
                read[key] = (changes, fact().process(lines) if lines else fact().default())
        else:
            lines.append(line)


def _entry(fact: type[FactBase], kwargs: dict) -> tuple[dict, tuple, int]:
    """The current host's remembered answers, the key of this fact among them, and the host's changes now."""
    key = (getattr(ctx_state.get(), "is_executing", False), fact, repr(sorted(kwargs.items())))
    return _READ.setdefault(ctx_host.get(), {}), key, changes_on_host()

