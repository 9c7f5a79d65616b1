"""`k3ops doctor INVENTORY`: read every host's state and name the runbook for what is wrong."""

from __future__ import annotations

import json

from ..doctor.findings import UNKNOWN_EXIT
from ..maintenance import owner, standing
from .output import add_json_flag, add_limit_flag, table

SUMMARY_HEADER = ("HOST", "STATUS", "RUNBOOK", "SEVERITY", "ACTION", "SUMMARY")


def register(verbs) -> None:
    doctor = verbs.add_parser("doctor", help="read each host's state (read-only) and name the runbook for each "
                                             "problem; exit 0 healthy, 1 warning, 2 critical, 3 bad input")
    doctor.add_argument("inventory")
    add_limit_flag(doctor, "every host")
    add_json_flag(doctor)
    doctor.set_defaults(handler=run, bad_input_exit=UNKNOWN_EXIT)


def run(args) -> int:
    from ..doctor.diagnose import run_doctor
    from ..doctor.findings import exit_status

    diagnoses = run_doctor(args.inventory, args.limit)
    status = exit_status(diagnoses)
    if args.json:
        print(json.dumps({"exit_status": status, "hosts": [diagnosis.to_json() for diagnosis in diagnoses]}, indent=1))
    else:
        print(report(diagnoses))
    return status


def report(diagnoses) -> str:
    """One line per finding (a healthy host gets one line), then each finding's evidence and the host's notes."""
    rows, details = [], []
    for diagnosis in diagnoses:
        status = diagnosis.status.upper()
        if diagnosis.error:
            rows.append((diagnosis.host, status, "-", "critical", "-", diagnosis.error))
        elif diagnosis.maintenance is not None:
            marker = diagnosis.maintenance
            rows.append((diagnosis.host, status, "-", "-", "-", f"under maintenance: {marker.get('reason', '?')} "
                         f"(since {marker.get('since', '?')}, by {owner(marker)}, {standing(marker)[1]}); "
                         f"{len(diagnosis.findings)} findings held back"))
        elif not diagnosis.findings:
            rows.append((diagnosis.host, status, "-", "-", "-", "; ".join(diagnosis.unchecked) or "no problem found"))
        for finding in [] if diagnosis.maintenance is not None else diagnosis.findings:
            rows.append((diagnosis.host, status, finding.runbook, finding.severity, finding.action, finding.summary))
            details.append(f"{diagnosis.host} {finding.runbook} (runbooks/{finding.runbook}.md, from {finding.check}):")
            details += [f"    {line}" for line in finding.evidence]
        details += [f"{diagnosis.host} unchecked: {line}" for line in diagnosis.unchecked if diagnosis.findings]
        details += [f"{diagnosis.host} note: {line}" for line in diagnosis.notes]
    return table(SUMMARY_HEADER, rows) + ("\n\n" + "\n".join(details) if details else "")
