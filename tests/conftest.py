"""Shared test helpers: where the real captured tool outputs live, and the CLI run in this process."""

import contextlib
import io
import os
import subprocess
from pathlib import Path

# pyinfra's CLI monkey-patches the process for gevent as it is imported; an import after some test has
# started a thread (huggingface_hub's progress monitor) breaks the import lock. Patch first, as pyinfra does.
import pyinfra_cli  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "real"  # the workplace's captures, copied: a clone is whole


def cli(*argv: str) -> subprocess.CompletedProcess:
    """`k3ops ARGV` by the CLI's own entry point in this process (seconds saved per call over a new Python; the
    command line itself is tests/unit/test_cli.py's): what it prints, and the status it exits with."""
    from k3ops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exited:  # argparse's refusals
            status = exited.code
    return subprocess.CompletedProcess(list(argv), status, out.getvalue(), err.getvalue())


def real_output(relative: str) -> str:
    """A captured output from tests/fixtures/real/, without its two provenance header lines."""
    text = (REAL_FIXTURES / relative).read_text()
    return text.split("\n", 2)[2]


def fleet_public_key(directory: Path, comment: str = "k3ops-peers") -> str:
    """A real ed25519 public key line, made by ssh-keygen in `directory` (private key beside it, 0600)."""
    import subprocess

    key = directory / "fleet_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], check=True)
    return key.with_suffix(".pub").read_text().strip()


# Each module's wall time (its lab's start and end included), printed after every run: CI's log shows where its
# budget goes. The table's file is this run's alone: pytest runs that tests start (host checks) do not add to it.
_module_times: dict[str, list[float]] = {}
_times_file = os.environ.pop("K3OPS_MODULE_TIMES", None)


def pytest_runtest_logstart(nodeid, location):
    import time

    _module_times.setdefault(nodeid.split("::", 1)[0], [time.monotonic(), time.monotonic()])


def pytest_runtest_logfinish(nodeid, location):
    import time

    _module_times[nodeid.split("::", 1)[0]][1] = time.monotonic()


def pytest_terminal_summary(terminalreporter):
    """The table after the run; with K3OPS_MODULE_TIMES set, its rows are also added to that file, from which
    scripts/test prints one table of all its runs."""
    if not _module_times:
        return
    rows = [f"{end - start:8.1f} s  {module}"
            for module, (start, end) in sorted(_module_times.items(), key=lambda item: item[1][0])]
    terminalreporter.section("wall time per module")
    for row in rows:
        terminalreporter.write_line(row)
    terminalreporter.write_line(f"{sum(end - start for start, end in _module_times.values()):8.1f} s  in all")
    if _times_file:
        with open(_times_file, "a") as table:
            table.write("".join(f"{row}\n" for row in rows))
