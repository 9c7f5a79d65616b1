"""Facts outside a deploy: the same fact classes, asked over testinfra or paramiko.

A deploy asks `host.get_fact(NvidiaGpus)` through pyinfra; the host checks and the status commands
ask the same question through `read_fact`, which builds the command and reads its output the way
pyinfra does, so every question about a host has one command and one parser (`fact_command` also builds
the parts of a deploy's one command for several facts: k3ops.facts.memo.read_together).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from pyinfra.api import FactBase, StringCommand

MISSING_COMMAND_MARKER = "K3OPS_MISSING_COMMAND"

# How a command is run on a host: (exit status 0, stdout, stderr).
Runner = Callable[[str], tuple[bool, str, str]]


class FactError(RuntimeError):
    pass


def _text(command) -> str:
    return command.get_raw_value() if isinstance(command, StringCommand) else str(command)


def fact_command(fact: FactBase, **arguments) -> str:
    """The shell command pyinfra would run for this fact: the fact's own, guarded by its required command."""
    command = _text(fact.command(**arguments) if callable(fact.command) else fact.command)
    required = fact.requires_command(**arguments) if callable(fact.requires_command) else fact.requires_command
    if not required:
        return command
    return (f"if command -v {shlex.quote(_text(required))} >/dev/null 2>&1; then ( {command} ); "
            f"else echo {MISSING_COMMAND_MARKER}; fi")


def read_fact(run: Runner, fact_class: type[FactBase], **arguments):
    """The fact's value on the host `run` reaches: its default when the command it needs is missing
    or prints nothing; a FactError when the command fails."""
    fact = fact_class()
    ok, stdout, stderr = run(fact_command(fact, **arguments))
    if not ok:
        raise FactError(f"{fact_class.__name__}: {stderr.strip() or 'the command failed'}")
    lines = stdout.splitlines()
    if not lines or lines == [MISSING_COMMAND_MARKER]:
        return fact.default()
    return fact.process(lines)
