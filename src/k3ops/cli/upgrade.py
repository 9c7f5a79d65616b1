"""`k3ops upgrade driver|rocm|model|status|resume|abort`: a rolling, resumable upgrade of a serving fleet's driver
or model revision."""

from __future__ import annotations

import json

from .output import add_json_flag, add_limit_flag, table

STATUS_HEADER = ("GROUP", "HOSTS", "STATE", "SINCE", "DETAIL")


def register(verbs) -> None:
    from ..upgrade.releases import MODEL_REVISION, NVIDIA_DRIVER, ROCM

    upgrade = verbs.add_parser("upgrade", help="move a serving fleet to another driver or model revision, an engine "
                                               "group at a time")
    commands = upgrade.add_subparsers(dest="upgrade_command", required=True)
    for release, what in ((NVIDIA_DRIVER, "a rolling NVIDIA driver upgrade (or rollback)"),
                          (ROCM, "a rolling ROCm release change, amdgpu with it (or rollback)"),
                          (MODEL_REVISION, "a rolling change of the served model's revision, staged on every host "
                                           "first (or a rollback to a revision still in the cache)")):
        command = commands.add_parser(release.kind, help=f"plan and run {what}")
        command.add_argument("inventory")
        command.add_argument("--to", required=True, metavar="VERSION", help=f"the release: {release.example}")
        command.add_argument("--canary", type=int, default=1, metavar="N",
                             help="groups upgraded (and soaked) first, alone (default 1)")
        command.add_argument("--max-unavailable", default="1", metavar="N|P%",
                             help="hosts out of service at once, counting hosts already out (default 1)")
        command.add_argument("--max-failures", type=int, default=0, metavar="N",
                             help="failed groups tolerated before the rollout halts (default 0: the first halts it)")
        add_limit_flag(command, f"every {release.vendor_name} host; whole engine groups")
        command.add_argument("--dry-run", action="store_true", help="print the plan (groups, order, batches) and stop")
        add_write_data_flag(command)
        command.add_argument("--take-over", action="append", default=[], metavar="ROLLOUT",
                             help="treat hosts marked by this dead rollout (its id, from the marker or the doctor) as "
                                  "this rollout's own, instead of holding them (repeatable)")
        command.set_defaults(handler=start, release=release)
    status = commands.add_parser("status", help="the recorded rollout: each group's state")
    status.add_argument("inventory", nargs="?")
    add_json_flag(status)
    status.set_defaults(handler=show_status)
    for name, handler, help_text in (("resume", resume, "go on with the unfinished rollout (after a dead controller "
                                                        "or a halt); failed groups are retried"),
                                     ("abort", abort, "stop the rollout within seconds; hosts out of service "
                                                      "stay out")):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("inventory", nargs="?", help="the rollout's inventory (default: the only unfinished one)")
        command.set_defaults(handler=handler)
        if name == "resume":
            add_write_data_flag(command)


def add_write_data_flag(command) -> None:
    command.add_argument("--write-data", action="store_true",
                         help="once every group is done, set the release (nvidia_driver_version, rocm_release, the "
                              "model's revision) in the group_data file that sets it (without: the exact change is "
                              "printed)")


def start(args) -> int:
    from ..upgrade.rollout import new_rollout, planned, run_rollout

    adopted = taken_over(args.take_over)
    rollout = new_rollout(args.inventory, args.release, args.to, args.canary, args.max_unavailable, args.max_failures,
                          args.limit)
    print(plan_text(rollout, planned(rollout)))
    if args.dry_run:
        return 0
    rollout.record.update(write_data=args.write_data, taken_over=adopted)
    rollout.save()
    return run_rollout(rollout)


def taken_over(ids: list[str]) -> list[str]:
    """The rollout ids given to --take-over, each as a marker names it."""
    from ..upgrade.record import ROLLOUT_ID

    for found in ids:
        if not ROLLOUT_ID.fullmatch(found):
            raise ValueError(f"--take-over: {found!r} is not a rollout id (16 hex digits, as a marker's `rollout`)")
    return ids


def plan_text(rollout, batches: list[list[dict]]) -> str:
    from ..upgrade.releases import of

    record = rollout.record
    lines = [f"rollout of {record['inventory']} to {of(record).label} {record['to']}: {len(rollout.groups)} engine "
             f"groups, at most {record['budget']} hosts out of service at once "
             f"(--max-unavailable {record['max_unavailable']}, counting hosts already out), halting after {record['max_failures'] + 1} failed groups"]
    for number, batch in enumerate(batches, 1):
        kind = "canary, then a soak" if any(group["canary"] for group in batch) else "batch"
        lines.append(f"  {number}. {kind}: " + "; ".join(f"{group['name']} ({', '.join(group['hosts'])})"
                                                      for group in batch))
    lines += [f"  not in the rollout: {skipped}" for skipped in record["skipped"]]
    return "\n".join(lines)


def show_status(args) -> int:
    from ..upgrade.record import Rollout, record_path, unfinished

    rollout = Rollout.load(record_path(args.inventory)) if args.inventory and record_path(args.inventory).exists() \
        else unfinished(args.inventory)
    if args.json:
        print(json.dumps(rollout.record, indent=1))
        return 0
    record = rollout.record
    print(f"rollout of {record['inventory']} to {record['to']}: {record['status']}"
          + (f" ({record['why']})" if record.get("why") else ""))
    rows = [(group["name"], ",".join(group["hosts"]),
             group["state"] + (f" (rolled back from {group['rolled_back_from']})" if "rolled_back_from" in group else ""),
             group.get("since", "-"), group.get("detail", "")) for group in rollout.groups]
    print(table(STATUS_HEADER, rows))
    return 0


def resume(args) -> int:
    from ..upgrade.record import unfinished
    from ..upgrade.rollout import run_rollout

    rollout = unfinished(args.inventory)
    rollout.check_inventory(args.inventory)
    rollout.record["write_data"] = rollout.record.get("write_data", False) or args.write_data
    return run_rollout(rollout, retry_failed=True)


def abort(args) -> int:
    from ..upgrade.machine import OUT_OF_SERVICE
    from ..upgrade.record import RUNNING, Rollout, unfinished
    from ..upgrade.releases import of
    from ..upgrade.rollout import request_abort

    rollout = unfinished(args.inventory)
    request_abort(rollout)
    rollout = Rollout.load(rollout.path)
    if rollout.status == RUNNING:
        print("the rollout's controller stops within seconds (`k3ops upgrade status` shows when)")
    out = [f"{group['name']} ({', '.join(group['hosts'])}): {group['state']}" for group in rollout.groups
           if group["state"] in OUT_OF_SERVICE]
    print(f"rollout of {rollout.record['inventory']} aborted"
          + ("; out of service and marked, until a person returns them (`k3ops upgrade {of(rollout.record).kind} "
             f"INVENTORY --to VERSION --limit HOSTS` moves them on or back): {'; '.join(out)}" if out else ""))
    return 0
