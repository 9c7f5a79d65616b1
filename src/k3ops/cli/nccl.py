"""`k3ops nccl check|status INVENTORY`: verify the GPU fabric before a model loads, and read the last result."""

from __future__ import annotations

import json

from ..facts.fabric_check import LastFabricCheck
from ..remote import on_hosts
from ..settings import settings_of
from .output import add_inventory_command, add_limit_flag, print_results, table

GIB = 1024**3


def register(verbs) -> None:
    nccl = verbs.add_parser("nccl", help="inter-node NCCL/RCCL checks of the GPU fabric")
    commands = nccl.add_subparsers(dest="nccl_command", required=True)
    check = add_inventory_command(commands, "check", run_check, "pre-checks, then all_reduce on each host and "
                                  "all_reduce and alltoall across each engine cluster; exit 0 only if all pass",
                                  rows=True)
    add_limit_flag(check, "every GPU host")
    check.add_argument("--baseline", action="store_true",
                       help="also print the passing figures as group data (nccl_baseline) per hardware profile")
    add_inventory_command(commands, "status", show_status, "each host's last fabric check: when, driver, verdict",
                          rows=True)


def size(size_bytes: int) -> str:
    return f"{size_bytes / GIB:g}G" if size_bytes >= GIB else f"{size_bytes >> 20}M"


def figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def rows(check) -> list[list[str]]:
    """The table: a pre-check row per host, then each test and each localization pair."""
    lines = []
    for name, host in check.hosts.items():
        problems = host.problems
        lines.append([name, "pre-checks", "-", "-", "-", "fail" if problems else "pass", "; ".join(problems)])
    for runs, suffix in ((check.runs, ""), (check.locating_runs, " (locating)")):
        lines += [["+".join(run.hosts), run.test + suffix, size(run.size_bytes), figure(run.busbw),
                   figure(run.threshold), run.verdict, run.reason] for run in runs]
    return lines


def verdict_lines(check) -> list[str]:
    found = []
    for cluster, located in check.localizations.items():
        if located.at_fault:
            how = (f"{len(located.rounds)} round(s) of pairs beside known-good hosts" if located.rounds else "")
            if located.nic_loopback:
                how += ("; " if how else "") + "alone through its own NICs (no known-good host to pair with)"
            found.append(f"cluster {cluster}: at fault: {', '.join(located.at_fault)} ({how})")
        if located.undecided:
            found.append(f"cluster {cluster}: cannot tell which of {', '.join(located.undecided)} is at fault: no "
                         "known-good host of the same hardware to pair with")
        if not located.at_fault and not located.undecided:
            found.append(f"cluster {cluster}: every host passed beside a known-good one; the cluster's own run "
                         "failed (rerun to tell a transient fault from a lasting one)")
    return found


def run_check(args) -> int:
    from ..nccl.check import baseline, host_result, run_check as check_fabric

    check = check_fabric(args.inventory, args.limit)
    figures = baseline(check) if args.baseline else {}
    if args.json:
        print(json.dumps({"passed": check.passed,
                          "hosts": {name: host_result(check, host) for name, host in check.hosts.items()},
                          "locating": [run.to_json() for run in check.locating_runs],
                          "localization": {cluster: vars(found) for cluster, found in check.localizations.items()},
                          **({"baseline": figures} if args.baseline else {})}, indent=1))
        return 0 if check.passed else 1
    print(table(["HOST", "TEST", "SIZE", "BUSBW GB/s", "THRESHOLD", "VERDICT", "REASON"], rows(check)))
    for line in verdict_lines(check):
        print(line)
    for profile, measured in figures.items():
        print(f"# group data for the {profile} hosts (their median passing figures):\nnccl_baseline = {measured!r}")
    print("fabric check: " + ("passed" if check.passed else "FAILED"))
    return 0 if check.passed else 1


STATUS_COLUMNS = [
    ("HOST", lambda row: row["host"]),
    ("CHECKED", lambda row: row.get("time") or "never"),
    ("DRIVER", lambda row: row.get("driver") or "-"),
    ("CLUSTER", lambda row: (row.get("cluster") or {}).get("name") or "-"),
    ("VERDICT", lambda row: row.get("verdict") or "-"),
    ("REASONS", lambda row: "; ".join(row.get("reasons", []))),
]


def show_status(args) -> int:
    def last(host) -> dict:
        return host.get_fact(LastFabricCheck) or {}

    selected = lambda data: settings_of(data).gpu.gpu_vendor is not None  # noqa: E731
    return print_results(on_hosts(args.inventory, selected, last), STATUS_COLUMNS, args.json)
