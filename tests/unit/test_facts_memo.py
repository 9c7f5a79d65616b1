"""A fact read through `remembered` is asked of the host once, and again only after an operation on that host ran
commands; `read_together` asks several in one command: run with pyinfra's own API on this machine (@local), where
the fact's command counts its runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyinfra.api import Config, FactBase, Inventory, State, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import server

from k3ops.facts.memo import read_together, remembered


class TimesAsked(FactBase[int]):
    """How many times this fact's command has run (each run adds a line to the file)."""

    def command(self, path: str) -> str:
        return f"echo asked >> {path} && wc -l < {path}"

    def process(self, output) -> int:
        return int(output[0])


@pytest.fixture
def local_state() -> State:
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    return state


class NeedsATool(FactBase[str]):
    """A fact whose tool is not installed: pyinfra gives its default."""

    command = "no-such-tool-k3ops --version"
    default = str

    def requires_command(self) -> str:
        return "no-such-tool-k3ops"


def run(state: State, steps: list) -> list[int]:
    """Add the steps and run them: ("read", path) reads the fact, ("change", command) runs a command, ("skip",
    command) is an operation whose `_if` says no. Returns the value each read was given."""
    seen: list[int] = []

    @operation()
    def read(path: str):
        value = remembered(TimesAsked, path=path)
        if state.is_executing:  # add_op also plans each operation first, as a deploy run without -y does
            seen.append(value)
        yield from ()

    @operation()
    def together(paths: list[str]):
        read_together(*((TimesAsked, {"path": path}) for path in paths), NeedsATool)
        yield from ()

    for kind, value in steps:
        if kind == "read":
            add_op(state, read, path=value)
        elif kind == "read together":
            add_op(state, together, paths=value)
        else:
            add_op(state, server.shell, commands=[value], **({"_if": lambda: False} if kind == "skip" else {}))
    run_ops(state)
    return seen


def test_reads_between_changes_ask_once(local_state, tmp_path):
    counter = str(tmp_path / "asked")
    steps = [("read", counter), ("read", counter), ("change", "true"), ("read", counter), ("read", counter)]
    assert run(local_state, steps) == [2, 2, 3, 3]
    assert Path(counter).read_text().count("asked") == 3  # the plan's read, then one before and one after


def test_an_operation_that_runs_nothing_keeps_the_value(local_state, tmp_path):
    counter = str(tmp_path / "asked")
    assert run(local_state, [("read", counter), ("skip", "true"), ("read", counter)]) == [2, 2]


def test_each_argument_is_its_own_fact(local_state, tmp_path):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    assert run(local_state, [("read", first), ("read", second), ("read", first)]) == [2, 2, 2]


def test_facts_read_together_take_one_command_and_are_remembered(local_state, tmp_path):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    steps = [("read together", [first, second]), ("read", first), ("read", second)]
    assert run(local_state, steps) == [2, 2]  # the plan's read together, then the execution's: no read alone
    assert remembered_in(local_state, NeedsATool) == ""  # its tool missing, it was left to pyinfra, asked alone


def test_a_fact_whose_command_fails_is_left_to_be_asked_alone(local_state, tmp_path):
    broken = str(tmp_path / "no-such-directory" / "asked")  # echo >> fails: the fact is not remembered
    counter = str(tmp_path / "asked")
    assert run(local_state, [("read together", [broken, counter]), ("read", counter)]) == [2]
    Path(broken).parent.mkdir()
    assert remembered_in(local_state, TimesAsked, path=broken) == 1  # asked now, alone: nothing was remembered


def remembered_in(state: State, fact, **kwargs) -> object:
    with ctx_state.use(state), ctx_host.use(state.inventory.get_host("@local")):
        return remembered(fact, **kwargs)
