"""What the doctor says of a host: findings that name a runbook, notes that need nobody, and the verdict.

Exit statuses are Nagios' (fleet-ops.md C1): 0 healthy, 1 warning, 2 critical, 3 unknown, so cron, Slurm
health checks and monitoring read them as they read any check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .runbooks import runbooks

SEVERITY_RANK = {"warning": 1, "critical": 2}
# Of two findings of one runbook and severity, the one needing more is kept: a GPU to replace outranks a reset.
ACTION_RANK = {"none": 0, "restart service": 1, "restart engine": 2, "rerun the deploy": 2, "free disk space": 2,
               "restart fabric manager": 3, "drain, then reset GPU": 4, "reset GPU": 5, "reboot": 6,
               "drain and inspect hardware": 7, "return to service": 7}
# A finding that another explains: a GPU fallen off the bus (Xid 79) is why fewer GPUs show.
# An engine a rollout stopped and left stopped is down because of the rollout.
EXPLAINED_BY = {"gpu-count-below-spec": "gpu-fallen-off-bus", "engine-not-running": "host-left-in-maintenance"}
STATUS_EXIT = {"healthy": 0, "maintenance": 0, "warning": 1, "critical": 2, "unreachable": 2}
UNKNOWN_EXIT = 3  # Nagios' UNKNOWN: the inventory or the command line was wrong, no host was asked


@dataclass
class Finding:
    """Something wrong on a host, the runbook that deals with it, and the lines that show it."""

    runbook: str
    severity: str  # "warning" or "critical"
    action: str  # xids.Action, or a host's own: restart service, rerun the deploy, free disk space
    summary: str
    evidence: list[str] = field(default_factory=list)
    # What the runbook's commands need to know ($GPU, $HOSTS, ...), from what the check saw.
    variables: dict[str, str] = field(default_factory=dict)
    check: str = ""  # the doctor check that found it (set by the doctor)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"a finding is a warning or critical, not {self.severity!r}")

    def to_json(self) -> dict:
        book = runbooks()[self.runbook]
        return {"runbook": self.runbook, "runbook_path": book.location, "title": book.title,
                "automatable": book.automatable, "check": self.check,
                "severity": self.severity, "action": self.action, "summary": self.summary,
                "evidence": self.evidence, "variables": self.variables}


@dataclass
class Diagnosis:
    """One host's findings, notes, the checks it could not run, and whether someone is working on it."""

    host: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    maintenance: dict | None = None
    error: str | None = None  # the host could not be reached
    commands: int = 0

    @property
    def status(self) -> str:
        if self.error is not None:
            return "unreachable"
        if self.maintenance is not None:
            return "maintenance"
        worst = max((SEVERITY_RANK[finding.severity] for finding in self.findings), default=0)
        if worst == 0 and self.unchecked:
            worst = SEVERITY_RANK["warning"]
        return {0: "healthy", 1: "warning", 2: "critical"}[worst]

    def to_json(self) -> dict:
        return {"host": self.host, "status": self.status, "findings": [finding.to_json() for finding in self.findings],
                "notes": self.notes, "unchecked": self.unchecked, "maintenance": self.maintenance,
                "error": self.error, "commands": self.commands}


def merged(findings: list[Finding]) -> list[Finding]:
    """One finding per runbook: several checks seeing one failure (Xid 74 and an inactive NVLink) are one
    incident, at the worst severity seen, with every line of evidence; worst first. A finding another explains
    (EXPLAINED_BY) joins that one."""
    found = {finding.runbook for finding in findings}
    by_runbook: dict[str, Finding] = {}
    for finding in findings:
        if EXPLAINED_BY.get(finding.runbook) in found:
            finding = Finding(**{**finding.__dict__, "runbook": EXPLAINED_BY[finding.runbook]})
        kept = by_runbook.get(finding.runbook)
        if kept is None:
            by_runbook[finding.runbook] = Finding(**{**finding.__dict__, "evidence": list(finding.evidence),
                                                     "variables": dict(finding.variables)})
            continue
        if weight(finding) > weight(kept):
            kept.severity, kept.action, kept.summary = finding.severity, finding.action, finding.summary
            kept.variables = {**kept.variables, **finding.variables}
        kept.evidence += [line for line in finding.evidence if line not in kept.evidence]
        kept.variables = {**finding.variables, **kept.variables}
    return sorted(by_runbook.values(), key=lambda finding: -SEVERITY_RANK[finding.severity])


def weight(finding: Finding) -> tuple[int, int]:
    return SEVERITY_RANK[finding.severity], ACTION_RANK.get(finding.action, 0)


def exit_status(diagnoses: list[Diagnosis]) -> int:
    return max((STATUS_EXIT[diagnosis.status] for diagnosis in diagnoses), default=0)
