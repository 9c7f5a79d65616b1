"""One test run judged: pass, fail or hang, with the figure and the reason an SRE needs.

The bus bandwidth is read from the row at the target message size (the footer's average mixes every
size, so small messages drag it down); wrong values or out-of-bounds counts fail whatever the speed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .launch import TIMED_OUT
from .report import busbw_at, parse, wrong_values

OUTPUT_LINES_IN_REASON = 3


@dataclass
class FabricRun:
    """A test on one host (`hosts` of one) or across hosts, and its verdict."""

    test: str  # a thresholds.TestKind
    hosts: list[str]
    size_bytes: int
    threshold: float | None = None
    threshold_source: str = ""
    verdict: str = "skipped"  # pass, fail, hang or skipped
    busbw: float | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    library_version: str | None = None
    tests_version: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_json(self) -> dict:
        return asdict(self)


def judge(run: FabricRun, status: int, output: str, errors: str, timeout_seconds: int) -> FabricRun:
    """Fill in `run`'s verdict from the test's exit status and output."""
    try:
        report = parse(output)
    except ValueError as error:  # several runs in one output: a test binary built without MPI under mpirun
        run.verdict, run.reason = "fail", str(error)
        return run
    run.warnings, run.library_version, run.tests_version = report.warnings, report.library_version, report.tests_version
    run.busbw = busbw_at(report, run.size_bytes)
    wrong = wrong_values(report) + (report.out_of_bounds or 0)
    if status in TIMED_OUT:
        run.verdict, run.reason = "hang", f"did not finish within {timeout_seconds} s"
    elif wrong:
        run.verdict, run.reason = "fail", f"{wrong} wrong values (data corrupted in transit)"
    elif status != 0 or not report.finished:
        tail = [line for line in (errors or output).strip().splitlines() if line.strip()][-OUTPUT_LINES_IN_REASON:]
        run.verdict = "fail"
        run.reason = f"exited {status}" + (f": {' | '.join(tail)}" if tail else "") if status else "report ended early"
    elif run.busbw is None:
        run.verdict, run.reason = "fail", f"no row at {run.size_bytes} bytes in the report"
    elif run.threshold is not None and run.busbw < run.threshold:
        run.verdict = "fail"
        run.reason = f"slow: {run.busbw:g} GB/s is below {run.threshold:g} ({run.threshold_source})"
    else:
        run.verdict = "pass"
        run.reason = "" if run.threshold is not None else f"not judged on speed: {run.threshold_source}"
    if run.verdict != "pass" and run.warnings:
        run.reason += f"; NCCL: {run.warnings[-1].strip()}"
    return run
