"""The runbooks in runbooks/: each file's header (what the doctor links to) and the steps a drill runs.

A runbook is markdown with a `---` header of `key: value` lines (HEADER_KEYS) and the sections of
RUNBOOK_SECTIONS. In Remedy and Verify, fenced blocks are steps: ```sh runs on the affected host as
root, ```sh controller on the controller, ```text out-of-band is done by hand (runbooks/README.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from .. import runbooks as runbook_files

HEADER_KEYS = ("id", "title", "severity", "finding", "automatable", "drill", "remedy_source")
# `metric`: the exporter metrics that show the symptom between doctor runs (an alert reads each: k3ops.monitoring).
OPTIONAL_HEADER_KEYS = ("metric",)
RUNBOOK_SECTIONS = ("Symptoms", "Detect", "Diagnose", "Remedy", "Verify", "Prevent")
STEP_SECTIONS = ("Remedy", "Verify")
SEVERITIES = ("warning", "critical")
RUNBOOK_ID_REGEX = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
# Where a fenced block's commands run, by its info string.
STEP_PLACES = {"sh": "host", "sh controller": "controller", "text out-of-band": "out-of-band"}
FENCE_REGEX = r"^```([^\n`]*)\n(.*?)^```\s*$"
# `lab <fault>`: drilled on any lab host; `vm-lab <fault>`: on a VM host (the fault needs a kernel of the host's own).
DRILL_REGEX = r"^(?:(?P<lab>lab|vm-lab) (?P<fault>[a-z0-9-]+)|none: (?P<why>.+))$"

Place = Literal["host", "controller", "out-of-band"]


class RunbookError(ValueError):
    pass


@dataclass(frozen=True)
class Step:
    """One fenced block of Remedy or Verify: its commands (or, out-of-band, its instructions)."""

    place: Place
    lines: tuple[str, ...]

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(line for line in self.lines if line.strip() and not line.lstrip().startswith("#"))


@dataclass(frozen=True)
class Runbook:
    id: str
    title: str
    severity: str
    checks: tuple[str, ...]  # the doctor checks that detect it (the header's `finding`)
    automatable: bool
    drill: str
    remedy_source: str  # who says its Remedy is the fix: a vendor's or a project's document, or k3ops' own reason
    path: Path
    sections: dict[str, str]
    metrics: tuple[str, ...] = ()

    @property
    def lab_fault(self) -> str | None:
        """The lab fault its drill injects (None: the lab cannot drill it, and the header says why)."""
        return re.match(DRILL_REGEX, self.drill)["fault"]

    @property
    def drilled_on_vm(self) -> bool:
        """Its drill needs a lab VM host: the fault goes in below what a container host has of its own."""
        return re.match(DRILL_REGEX, self.drill)["lab"] == "vm-lab"

    @property
    def location(self) -> str:
        """How people find it: runbooks/<id>.md in the repository."""
        return f"runbooks/{self.path.name}"

    def steps(self, section: str) -> list[Step]:
        if section not in STEP_SECTIONS:
            raise ValueError(f"steps live in {' and '.join(STEP_SECTIONS)}, not {section}")
        return [Step(STEP_PLACES[info.strip()], tuple(body.rstrip("\n").split("\n")))
                for info, body in re.findall(FENCE_REGEX, self.sections[section], re.MULTILINE | re.DOTALL)
                if info.strip() in STEP_PLACES]


def parse(path: Path) -> Runbook:
    """One runbook file, or a RunbookError naming the file and what is wrong with it."""
    text = path.read_text()
    header = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    if not header:
        raise RunbookError(f"{path}: no `---` header at the top")
    fields = {}
    for line in header.group(1).splitlines():
        key, colon, value = line.partition(":")
        if not colon:
            raise RunbookError(f"{path}: header line {line!r} is not `key: value`")
        fields[key.strip()] = value.split(" #")[0].strip()
    missing = [key for key in HEADER_KEYS if not fields.get(key)]
    if missing:
        raise RunbookError(f"{path}: header lacks {', '.join(missing)}")
    unknown = [key for key in fields if key not in (*HEADER_KEYS, *OPTIONAL_HEADER_KEYS)]
    if unknown:
        raise RunbookError(f"{path}: header key {', '.join(unknown)} is not one of "
                           f"{', '.join((*HEADER_KEYS, *OPTIONAL_HEADER_KEYS))}")
    if fields["id"] != path.stem or not re.match(RUNBOOK_ID_REGEX, fields["id"]):
        raise RunbookError(f"{path}: id {fields['id']!r} must be the file's name, lowercase words joined by dashes")
    if fields["severity"] not in SEVERITIES:
        raise RunbookError(f"{path}: severity {fields['severity']!r} is not one of {', '.join(SEVERITIES)}")
    if fields["automatable"] not in ("yes", "no"):
        raise RunbookError(f"{path}: automatable must be yes or no, not {fields['automatable']!r}")
    if not re.match(DRILL_REGEX, fields["drill"]):
        raise RunbookError(f"{path}: drill {fields['drill']!r} is not `lab <fault>`, `vm-lab <fault>` or `none: <why>`")
    body = text[header.end():]
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", body, re.MULTILINE | re.DOTALL))
    absent = [name for name in RUNBOOK_SECTIONS if name not in sections]
    if absent:
        raise RunbookError(f"{path}: no section {', '.join(absent)}")
    return Runbook(id=fields["id"], title=fields["title"], severity=fields["severity"],
                   checks=tuple(check.strip() for check in fields["finding"].split(",")),
                   automatable=fields["automatable"] == "yes", drill=fields["drill"],
                   remedy_source=fields["remedy_source"], path=path, sections=sections,
                   metrics=tuple(metric.strip() for metric in fields.get("metric", "").split(",") if metric.strip()))


def runbooks_directory() -> Path:
    """Where the runbooks k3ops ships are (they travel inside the package, like the templates)."""
    return Path(runbook_files.__path__[0]).resolve()


@cache
def runbooks() -> dict[str, Runbook]:
    """Every runbook k3ops ships, by id."""
    return {path.stem: parse(path) for path in sorted(runbooks_directory().glob("*.md")) if path.name != "README.md"}


def index_table() -> str:
    """runbooks/README.md's index, made from the headers so the two cannot disagree."""
    rows = ["| id | title | severity | detecting check | drill | remedy's source |", "|---|---|---|---|---|---|"]
    for book in runbooks().values():
        rows.append(f"| [{book.id}]({book.path.name}) | {book.title} | {book.severity} | {', '.join(book.checks)} "
                    f"| {book.drill.split(':')[0]} | {book.remedy_source} |")
    return "\n".join(rows)
