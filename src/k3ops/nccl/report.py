"""Read the text report of nccl-tests and rccl-tests: versions, ranks, the result rows and the footer.

A verdict judges the rows, the bus bandwidth at the message size that matters, never the footer's
"Avg bus bandwidth": that is the mean over every row of the run, latency-bound small sizes included,
so a healthy 2x8 H100 run that peaks at 338 GB/s averages 70. Standard library only: the controller
reads reports, hosts only print them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# `mpirun --tag-output` starts every line with the job and rank it came from: "[1,0]<stdout>:".
MPI_TAG_REGEX = r"^\[\d+,\d+\]<(?:stdout|stderr)>: ?"
# Lines that open a run: nccl-tests and rccl-tests print one run per process, so a text holding a
# second opener after a run's "# nThread" header holds a second run.
RUN_OPENER_REGEX = r"^# (?:[nr]ccl-tests version |Collective test starting: |nThread \d)"
RUN_HEADER_REGEX = r"^# nThread \d"
# "# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907" (nccl-tests 2.17.4 and later,
# rccl-tests 2.17.9 and later: "# rccl-tests version 2.17.9-develop:4a65e8d rccl-headers=...").
TESTS_VERSION_REGEX = (r"^# (?P<tool>nccl-tests|rccl-tests) version (?P<version>\S+)"
                       r"(?: [nr]ccl-headers=\d+ [nr]ccl-library=(?P<library>\d+))?")
# Older rccl-tests print "rccl-tests: Version develop:a7809b3" after the nThread line; one AMD
# document shows "rcccl-tests: Version Unknown".
RCCL_TESTS_VERSION_REGEX = r"^rc+l-tests: Version (?P<version>\S+)"
# The library announcing itself: "NCCL version 2.20.3+cuda12.3" (NCCL_DEBUG=VERSION or INFO, maybe
# behind "host:pid:tid [0] NCCL INFO "), RCCL's "RCCL version : 2.28.3-gfx1151-rccl:a188cf2".
LIBRARY_VERSION_REGEX = r"\b(?P<library>NCCL|RCCL) version\s*:?\s*(?P<version>\d+\.\d+\.\d+)"
COLLECTIVE_REGEX = r"^# Collective test starting: (?P<collective>\S+)"
CONCLUDED_REGEX = r"^# Collective test concluded: "
# "#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 [0000:04:00] NVIDIA H100 80GB HBM3";
# no Group before nccl-tests 2.13.4 and in 2024 rccl-tests, whose bus id is the full BDF
# (0000:05:00.0); nccl-tests 2.13 printed the bus number alone ([0x1b]); MI355X builds omit the name.
DEVICE_REGEX = (r"^#\s+Rank\s+(?P<rank>\d+)(?:\s+Group\s+\d+)?\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+"
                r"device\s+(?P<device>\d+)\s+\[(?P<bus_id>[^\]]*)\]\s*(?P<name>.*?)\s*$")
# The table's first header line names its halves: both, or "in-place" alone (rccl-tests -O 0).
HALVES_REGEX = r"^#\s+(?P<halves>(?:(?:out-of-place|in-place)\s*)+)$"
# The second names the columns; each half starts at its time column ("cputime" with -C 1).
COLUMNS_REGEX = r"^#\s+size\s+count\s+type\s+redop\s+root\s"
HALF_START_COLUMNS = ("time", "cputime")
ROW_REGEX = r"^\s*\d+\s+\d+\s"
NOT_AVAILABLE = "N/A"  # #wrong when validation is off (-c 0) or does not apply (alltoall in place)
OUT_OF_BOUNDS_REGEX = r"^# Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>OK|FAILED)"
AVERAGE_REGEX = r"^# Avg bus bandwidth\s*:\s*(?P<busbw>\S+)"
WARNING_REGEX = r"\b[NR]CCL WARN\b"

Tool = Literal["nccl-tests", "rccl-tests"]


@dataclass(frozen=True)
class Device:
    """One rank of the run and the GPU it drove; `bus_id` as printed ("0000:04:00", "0x1b", "0000:05:00.0")."""

    rank: int
    host: str
    device: int
    bus_id: str
    name: str | None


@dataclass(frozen=True)
class Half:
    """The out-of-place or in-place half of a row; `wrong` is None where the report says N/A."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


@dataclass(frozen=True)
class Row:
    """One message size; a half is None when the run did not measure it (rccl-tests -O 0)."""

    size_bytes: int
    count: int
    type: str
    redop: str
    out_of_place: Half | None
    in_place: Half | None


@dataclass(frozen=True)
class Report:
    """One run's report; `finished` says its footer came (a run cut short has rows but no footer)."""

    tool: Tool | None
    tests_version: str | None
    library_version: str | None
    collective: str | None
    ranks: list[Device]
    rows: list[Row]
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None
    average_busbw: float | None
    finished: bool
    warnings: list[str]


def parse(text: str) -> Report:
    """The report of the one run in `text`; a ValueError if the text holds several (see `parse_runs`)."""
    runs = parse_runs(text)
    if len(runs) > 1:
        names = ", ".join(run.collective or "unnamed" for run in runs)
        raise ValueError(f"the output holds {len(runs)} test runs ({names}), not one: read it with parse_runs "
                         "(a binary built without MPI=1 and started by mpirun prints one run per process)")
    return runs[0]


def parse_runs(text: str) -> list[Report]:
    """The report of every run in `text`, in order; a text with no run header is one run that never started."""
    lines = [re.sub(MPI_TAG_REGEX, "", line).rstrip() for line in text.splitlines()]
    runs, current, has_header = [], [], False
    for line in lines:
        if has_header and re.match(RUN_OPENER_REGEX, line):
            runs.append(current)
            current, has_header = [], False
        current.append(line)
        has_header = has_header or bool(re.match(RUN_HEADER_REGEX, line))
    runs.append(current)
    return [_report(run) for run in runs]


def row_at(report: Report, size_bytes: int) -> Row | None:
    """The first row at `size_bytes` (a run over several cycles, types or ops has more than one)."""
    return next((row for row in report.rows if row.size_bytes == size_bytes), None)


def busbw_at(report: Report, size_bytes: int) -> float | None:
    """The bus bandwidth at `size_bytes`: the lowest busbw of both halves of every row at that size."""
    measured = [half.busbw for row in report.rows if row.size_bytes == size_bytes
                for half in (row.out_of_place, row.in_place) if half is not None]
    return min(measured, default=None)


def wrong_values(report: Report) -> int:
    """Wrong values over every row and half (N/A counts 0)."""
    return sum(half.wrong or 0 for row in report.rows for half in (row.out_of_place, row.in_place) if half)


def _report(lines: list[str]) -> Report:
    """One run's lines (untagged) read into its report; lines of anything else are passed over."""
    tool = tests_version = tests_library = announced_library = collective = None
    ranks, rows, warnings = [], [], []
    halves, columns = (), []
    out_of_bounds = out_of_bounds_ok = average = None
    finished = False
    for line in lines:
        if re.search(WARNING_REGEX, line):
            warnings.append(line.strip())
        if found := re.match(TESTS_VERSION_REGEX, line):
            tool, tests_version, tests_library = found["tool"], found["version"], found["library"]
        elif found := re.match(RCCL_TESTS_VERSION_REGEX, line):
            tool, tests_version = "rccl-tests", found["version"]
        elif found := re.match(COLLECTIVE_REGEX, line):
            collective = found["collective"]
        elif found := re.match(DEVICE_REGEX, line):
            ranks.append(Device(int(found["rank"]), found["host"], int(found["device"]), found["bus_id"].lower(),
                                found["name"] or None))
        elif found := re.match(HALVES_REGEX, line):
            halves = tuple(found["halves"].split())
        elif re.match(COLUMNS_REGEX, line):
            columns = line.lstrip("#").split()
        elif halves and columns and re.match(ROW_REGEX, line):
            row = _row(line.split(), columns, halves)
            if row:
                rows.append(row)
        elif found := re.match(OUT_OF_BOUNDS_REGEX, line):
            out_of_bounds, out_of_bounds_ok = int(found["count"]), found["verdict"] == "OK"
        elif found := re.match(AVERAGE_REGEX, line):
            average, finished = float(found["busbw"]), True
        elif re.match(CONCLUDED_REGEX, line):
            finished = True
        if announced_library is None and (found := re.search(LIBRARY_VERSION_REGEX, line)):
            announced_library = found
    if tool is None and announced_library:
        tool = "rccl-tests" if announced_library["library"] == "RCCL" else "nccl-tests"
    if tests_library:
        library_version = _version_from_code(int(tests_library))
    else:
        library_version = announced_library["version"] if announced_library else None
    return Report(tool=tool, tests_version=tests_version, library_version=library_version, collective=collective,
                  ranks=ranks, rows=rows, out_of_bounds=out_of_bounds, out_of_bounds_ok=out_of_bounds_ok,
                  average_busbw=average, finished=finished, warnings=warnings)


def _row(cells: list[str], columns: list[str], halves: tuple[str, ...]) -> Row | None:
    """A row read against the table's columns; None for a line that does not fill them (cut short)."""
    if len(cells) != len(columns):
        return None
    starts = [index for index, name in enumerate(columns) if name in HALF_START_COLUMNS]
    if len(starts) != len(halves):
        return None
    preamble = dict(zip(columns[:starts[0]], cells))
    measured = {}
    try:
        for half, start, end in zip(halves, starts, [*starts[1:], len(columns)]):
            values = dict(zip(columns[start:end], cells[start:end]))
            wrong = values["#wrong"]
            measured[half] = Half(time_us=float(cells[start]), algbw=float(values["algbw"]),
                                  busbw=float(values["busbw"]),
                                  wrong=None if wrong == NOT_AVAILABLE else int(float(wrong)))
        size, count = int(preamble["size"]), int(preamble["count"])
    except ValueError:
        return None  # a line of other output that happens to have as many words
    return Row(size_bytes=size, count=count, type=preamble["type"], redop=preamble["redop"],
               out_of_place=measured.get("out-of-place"), in_place=measured.get("in-place"))


def _version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 22907 is 2.29.7 (major * 10000 + minor * 100 + patch)."""
    major, rest = divmod(code, 10000)
    return f"{major}.{rest // 100}.{rest % 100}"
