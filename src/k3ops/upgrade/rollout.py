"""A rolling driver upgrade (an NVIDIA driver, or a ROCm release with its amdgpu: releases.py): planned and
refused before any host is touched, then batch after batch, each group through drain, upgrade, reboot, validation
and soak, recorded at every step so that it resumes.

A failed group keeps its slot (its hosts stay out of service, marked failed) and counts against the failure
budget; past it, the rollout halts. `resume` retries failed groups from the step they failed at.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..deploys.reboot import is_controller
from ..facts.engine import EngineState
from ..facts.maintenance import MaintenanceMarker
from ..inventory import SshTarget, selected
from ..maintenance import foreign, owner
from ..remote import on_targets
from ..settings import host_settings, node_rank, settings_of
from . import plan, releases, steps
from .machine import ALREADY_THERE, IN_FLIGHT, ROLLED_BACK_AT, STEPS, TRANSITIONS, Group, State, retried_at
from .record import ABORTED, DONE, HALTED, RUNNING, UNFINISHED, Rollout, exclusive, inventory_digest, new_id, now, \
    record_path
from .releases import Release


def new_rollout(inventory: str, release: Release, to: str, canary: int, max_unavailable: str, max_failures: int,
                limit: list[str] | None) -> Rollout:
    """The rollout's record, every argument and host checked first: nothing is connected to here."""
    if refusal := release.refused(to):
        raise ValueError(refusal)
    if max_failures < 0:
        raise ValueError("--max-failures: give 0 (halt at the first failure) or more")
    # Which hosts move is read from their own data: the release laid over it (a model's dict) gives every host one.
    own = selected(inventory, limit)
    reasons = {host.name: release.not_moved(host.data.dict()) for host in own}
    if all(reasons.values()):
        raise ValueError(f"nothing to upgrade: no selected host of {inventory} takes a {release.label} rollout ("
                         + "; ".join(f"{name}: {why}" for name, why in reasons.items()) + ")")
    release = release.for_hosts([host.data.dict() for host in own if reasons[host.name] is None])
    chosen = selected(inventory, limit, release.data(to))  # every host's data, at the new version, validated
    fleet = [(host.name, host.data.dict()) for host in chosen[0].inventory] if chosen else []
    moving = [host for host in chosen if reasons[host.name] is None]
    skipped = [f"{host.name}: {reasons[host.name]}" for host in chosen if reasons[host.name] is not None]
    refusals = []
    if release.reboots:
        refusals += [f"{host.name}: is the machine running k3ops; a rollout never reboots its own controller"
                     for host in moving if is_controller(host)]
        refusals += [f"{host.name}: reboot_policy is 'never', and a new driver needs a reboot"
                     for host in moving if host_settings(host).gpu.reboot_policy != "allowed"]
    names = {host.name for host in moving}
    groups = plan.engine_groups([(name, data) for name, data in fleet if name in names
                                 or settings_of(data).engine.engine is not None])
    refusals += [f"engine group {group.name}: --limit selects {', '.join(h for h in group.hosts if h in names)} but "
                 f"not {', '.join(h for h in group.hosts if h not in names)}; a multi-node engine moves whole"
                 for group in groups if names & set(group.hosts) and not set(group.hosts) <= names]
    groups = [group for group in groups if set(group.hosts) <= names]
    allowed = plan.budget(max_unavailable, len(moving))
    refusals += plan.oversized(groups, allowed)
    if not 0 <= canary <= len(groups):
        refusals.append(f"--canary: {canary} groups, but the rollout has {len(groups)}")
    refusals += release.unpublished(moving, to)
    if refusals:
        raise ValueError("refused before touching any host:\n  " + "\n  ".join(refusals))
    path = record_path(inventory)
    if path.exists() and Rollout.load(path).status in UNFINISHED:
        found = Rollout.load(path)
        raise ValueError(f"a rollout of {inventory} to {found.record['to']} is {found.status} ({path}): "
                         "`k3ops upgrade resume` or `k3ops upgrade abort` it first")
    # The digest pins the inventory that `resume` executes to the one this rollout planned with.
    record = {"id": new_id(), "inventory": str(Path(inventory).resolve()),
              "inventory_sha256": inventory_digest(inventory), "release": release.kind, "to": to, "canary": canary,
              "max_unavailable": max_unavailable, "budget": allowed, "max_failures": max_failures,
              "limit": limit or [], "skipped": skipped, "started": now(), "status": RUNNING,
              **({"model": release.model} if release.model is not None else {}),
              "groups": [{"name": group.name, "hosts": list(group.hosts), "canary": index < canary,
                          "state": State.PENDING, "to": to, "detail": "", "failures": 0}
                         for index, group in enumerate(groups)]}
    return Rollout(path, record)


def planned(rollout: Rollout) -> list[list[Group]]:
    """The batches when no host is out of service, as the record's groups."""
    groups = [plan.Group(group["name"], tuple(group["hosts"])) for group in rollout.groups]
    return [[rollout.group(group.name) for group in batch]
            for batch in plan.batches(groups, rollout.record["canary"], rollout.record["budget"])]


def failures(rollout: Rollout) -> int:
    return sum(1 for group in rollout.groups if group["failures"])


def observe(run: steps.Run) -> dict[str, dict]:
    """Every host that serves what the rollout's hosts serve, as it is now, read before each batch: its marker, why
    it does not serve (`out`: unreachable, marked, or its engine not ready; None: it serves) and, for the
    rollout's own hosts, whether it already runs the rollout's driver, loaded, installed and held (`current`).
    Hosts out before the rollout, and hosts of the same model outside --limit, count against the budget too: the
    service loses them all the same."""
    ours = {host for group in run.rollout.groups for host in group["hosts"]}
    everyone = selected(run.inventory, None)
    served = {served_model(host.data.dict()) for host in everyone if host.name in ours} - {None}
    hosts = [host for host in everyone if host.name in ours or served_model(host.data.dict()) in served]
    fleet = [(member.name, member.data.dict()) for member in everyone[0].inventory]
    wanted = run.rollout.record["to"]

    def look(remote) -> dict:
        seen = {"marker": remote.get_fact(MaintenanceMarker), "out": None, "off_balancer": None}
        data = remote.data
        seen["current"] = remote.name in ours and run.release.current(
            remote, settings_of({**data, **run.release.data(wanted)}).gpu, wanted)
        if seen["marker"] is not None:
            seen["out"] = f"under maintenance: {seen['marker'].get('reason', '?')} (by {owner(seen['marker'])})"
        elif steps.engine_of(data) is not None and node_rank(remote.name, fleet) == 0:
            state = remote.get_fact(EngineState, **releases.state_urls(data))
            seen["off_balancer"] = steps.off_balancer(remote.name, data)
            seen["out"] = seen["off_balancer"] or (None if state["ready"] else f"engine not ready: {state['detail']}")
        return seen

    results = on_targets([SshTarget.of(host) for host in hosts], look)
    return {result.host: result.value if result.error is None else {"marker": None, "current": False,
                                                                   "out": result.error, "off_balancer": None}
            for result in results}


def served_model(data: dict) -> str | None:
    """The model a host's engine serves (None: it serves none)."""
    settings = settings_of(data)
    return settings.model.model.name if settings.engine.engine is not None and settings.model.model else None


def hold_hand_drained(run: steps.Run, seen: dict[str, dict]) -> None:
    """Pending groups with a host someone else took out of service (by a marker, or out of the load balancer with
    none) are held: left exactly as they are."""
    pending = [group for group in run.rollout.groups if group["state"] == State.PENDING]
    for group in pending:
        theirs = [f"{host}: {marker.get('reason', '?')} (by {owner(marker)})" for host in group["hosts"]
                  if foreign(marker := seen[host]["marker"], run.rollout.owns)]
        theirs += [f"{host}: {seen[host]['off_balancer']}, with no maintenance marker" for host in group["hosts"]
                   if seen[host].get("off_balancer") and seen[host]["marker"] is None]
        if theirs:
            run.move(group, TRANSITIONS[State.PENDING].hold,
                     "taken out of service by someone else, never re-admitted: " + "; ".join(theirs))
            pass_canary(run, group)
    run.save()


def pass_canary(run: steps.Run, group: Group) -> None:
    """A canary that will not be upgraded (held, or already there) proves nothing: the next pending group in line
    is the canary instead."""
    if not group["canary"]:
        return
    group["canary"] = False
    successor = next((other for other in run.rollout.groups if other["state"] == State.PENDING
                      and not other["canary"]), None)
    if successor is not None:
        successor["canary"] = True


def out_of_service(groups: list[Group], seen: dict[str, dict]) -> dict[str, str]:
    """The hosts that do not serve, and why: each one seen out, and every host of an engine group one of whose
    hosts is (a multi-node engine serves whole or not at all)."""
    down = {host: found["out"] for host, found in seen.items() if found["out"]}
    for group in groups:
        if any(host in down for host in group["hosts"]):
            for host in group["hosts"]:
                down.setdefault(host, f"its engine group {group['name']} does not serve")
    return down


def skip_current(run: steps.Run, seen: dict[str, dict]) -> None:
    """Pending groups that already run the driver and serve are done as they are: a rollout run again drains
    nothing."""
    for group in run.rollout.groups:
        if group["state"] == State.PENDING and all(seen[host]["current"] and seen[host]["out"] is None
                                                   for host in group["hosts"]):
            run.move(group, ALREADY_THERE, f"already runs {group['to']}, installed and held, and serves: nothing to do")
            pass_canary(run, group)
    run.save()


def advance(run: steps.Run, group: Group) -> None:
    """Take one group along its states' edges from where it is, until done or failed."""
    while group["state"] in STEPS:
        if run.rollout.abort_flag.exists():
            return
        state = State(group["state"])
        try:
            detail = STEPS[state](run, group)
        except steps.Aborted:
            return
        except Exception as error:  # noqa: BLE001  (anything a step meets fails the group, never the rollout)
            fail(run, group, f"{type(error).__name__}: {error}" if not isinstance(error, steps.StepFailed)
                 else str(error))
            if not roll_back(run, group):
                return
            continue
        run.move(group, TRANSITIONS[state].success, detail)


def fail(run: steps.Run, group: Group, detail: str) -> None:
    group["failed_at"], group["failures"] = group["state"], group["failures"] + 1
    problems = steps.take_out(run, group, detail) if group["state"] != State.PENDING else []
    run.move(group, TRANSITIONS[State(group["state"])].failure,
             detail + "".join(f"; and: {problem}" for problem in problems))


def rollback_version(group: Group, wanted: bool) -> str | None:
    """The driver a failed group goes back to: a canary's, when data wants it (upgrade_rollback_failed_canary),
    once, and only when its hosts all ran one other version before."""
    old = set((group.get("from") or {}).values())
    if not (wanted and group["canary"] and len(old) == 1 and old != {group["to"]} and "rolled_back_from" not in group):
        return None
    return old.pop()


def roll_back(run: steps.Run, group: Group) -> bool:
    """Move a failed canary back to the driver it ran, through the same steps; the rollout halts either way."""
    hosts = selected(run.inventory, group["hosts"])
    version = rollback_version(group, run.release.always_rolls_back_canary or all(
        host_settings(host).upgrade.upgrade_rollback_failed_canary for host in hosts))
    if version is None:
        return False
    group["rolled_back_from"], group["to"] = group["to"], version
    group.pop("before", None)
    why = "a failed canary goes back" if run.release.always_rolls_back_canary else "upgrade_rollback_failed_canary"
    run.move(group, ROLLED_BACK_AT, f"rolling back to {version} ({why})")
    return True


def retry(rollout: Rollout, group: Group) -> None:
    """`resume` takes a failed group up where machine.retried_at says (a rolled-back canary, serving again on its
    old driver, from its drain, to the rollout's version; one that failed its soak from its validation, which
    starts the engine its failure stopped), and looks at a held one again."""
    state = retried_at(group)
    if group["state"] == State.HELD:
        rollout.move(group, state, "held by hand before: looked at again by `k3ops upgrade resume`")
        return
    if "rolled_back_from" in group:
        group["to"] = group.pop("rolled_back_from")
        group.pop("before", None)
    group["failures"] = 0
    rollout.move(group, state, "retried by `k3ops upgrade resume`")


def stage_fleet(run: steps.Run) -> str | None:
    """Stage the release on every host of the rollout's groups not done or held, in one deploy (a model's fleet
    fetch: one Hub download, the peers copying from each other), before any group is drained (one resumed, or
    retried after its canary's rollback, included: its staged copy may be what failed); why it failed, or None.
    A group's deploy a dead controller left running is waited for first, never run beside."""
    groups = [group for group in run.rollout.groups if group["state"] not in (State.DONE, State.HELD)]
    if not groups:
        return None
    for group in groups:
        steps.awaited(run, group)
    # Kept in the record as a group is, so that the next controller waits for a staging deploy still running.
    staging = run.rollout.record.setdefault("staging", {"name": "every host of the rollout"})
    staging.update(hosts=[host for group in groups for host in group["hosts"]], to=run.rollout.record["to"])
    try:
        steps.stage(run, staging)
    except (steps.StepFailed, steps.Aborted) as error:
        return str(error) or "aborted by `k3ops upgrade abort`"
    return None


def stage_batch(run: steps.Run, batch: list[Group]) -> list[Group]:
    """Stage the new driver on every group of the batch before any is drained (a release staged on the whole fleet
    at the start is there already); a group that cannot stage fails while it still serves. Returns the groups
    ready to drain."""
    if run.release.stages_fleet:
        return batch
    def staged(group: Group) -> Group | None:
        try:
            steps.stage(run, group)
            return group
        except steps.StepFailed as error:
            fail(run, group, f"staging failed (still serving, untouched): {error}")
            return None
        except steps.Aborted:
            return None

    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        return [group for group in pool.map(staged, batch) if group is not None]


def run_rollout(rollout: Rollout, retry_failed: bool = False) -> int:
    """Work on the rollout until it is done, halted or aborted; 0 only when every group is done."""
    # The inventory's data is checked again before any host is touched (it may have changed since the start).
    selected(rollout.record["inventory"], [host for group in rollout.groups for host in group["hosts"]])
    with exclusive(rollout.path):
        rollout.abort_flag.unlink(missing_ok=True)
        if retry_failed:
            for group in rollout.groups:  # a rolled-back canary is done, but failed
                if group["state"] in (State.FAILED, State.HELD) or group.get("failures"):
                    retry(rollout, group)
        rollout.record["status"] = RUNNING
        rollout.save()
        run = steps.Run(rollout, rollout.path.with_suffix(".log"))
        run.say(f"rollout of {rollout.record['inventory']} to {rollout.record['to']} (log: {run.log})")
        if run.release.stages_fleet:
            run.say(f"staging {run.release.label} {rollout.record['to']} on every host of the rollout")
            if problem := stage_fleet(run):
                return finish(run, HALTED, f"staging failed; no host was drained, every host serves as before: "
                                           f"{problem}")
        while True:
            if rollout.abort_flag.exists():
                return finish(run, ABORTED, "aborted by `k3ops upgrade abort`")
            batch = [group for group in rollout.groups if group["state"] in IN_FLIGHT]
            if not batch:
                canaries = [group for group in rollout.groups if group["canary"]]
                if any(group["failures"] for group in canaries):
                    return finish(run, HALTED, "a canary group failed: "
                                  + ", ".join(group["name"] for group in canaries if group["failures"]))
                if failures(rollout) > rollout.record["max_failures"]:
                    return finish(run, HALTED, f"{failures(rollout)} groups failed, more than --max-failures "
                                               f"{rollout.record['max_failures']}")
                seen = observe(run)
                hold_hand_drained(run, seen)
                skip_current(run, seen)
                pending = [group for group in rollout.groups if group["state"] == State.PENDING]
                held = [group["name"] for group in rollout.groups if group["state"] == State.HELD]
                if not pending and held:
                    return finish(run, HALTED, f"{', '.join(held)} held by hand, not upgraded: `k3ops upgrade "
                                               "resume` once a person has returned them")
                if not pending:
                    return finish(run, DONE, "every group is done")
                queue = [group for group in pending if group["canary"]] or pending
                down = out_of_service(rollout.groups, seen)
                room = rollout.record["budget"] - len(down)
                chosen = plan.next_batch([plan.Group(g["name"], tuple(g["hosts"])) for g in queue], room, set(down))
                if not chosen:
                    return finish(run, HALTED, f"{len(down)} hosts are out of service "
                                               f"({'; '.join(f'{h}: {w}' for h, w in down.items())}): no room under "
                                               f"--max-unavailable {rollout.record['max_unavailable']}; resume when "
                                               "they are back")
                batch = stage_batch(run, [rollout.group(group.name) for group in chosen])
                for group in batch:
                    run.move(group, TRANSITIONS[State.PENDING].success)
            with ThreadPoolExecutor(max_workers=max(len(batch), 1)) as pool:
                list(pool.map(lambda group: advance(run, group), batch))


def finish(run: steps.Run, status: str, why: str) -> int:
    run.rollout.record.update(status=status, ended=now(), why=why)
    run.save()
    run.say(f"rollout {status}: {why}")
    if status == DONE:
        record = run.rollout.record
        run.say(f"every upgraded host runs {record['to']}: the inventory's data must say so (a deploy of the old "
                "value is refused on serving hosts):")
        ran = {version for group in run.rollout.groups for version in (group.get("from") or {}).values()}
        for line in run.release.data_change(record["inventory"], record["to"], ran, record.get("write_data", False)):
            run.say(f"  {line}")
    return 0 if status == DONE else 1


def request_abort(rollout: Rollout) -> None:
    """Stop the rollout: a running controller sees the flag between steps and in a step's waits (Run.pause); a
    dead one's record is ended here. Groups keep their state: hosts out of service stay out, marked."""
    rollout.abort_flag.touch()
    try:
        with exclusive(rollout.path):
            rollout.record.update(status=ABORTED, ended=now(), why="aborted by `k3ops upgrade abort`")
            rollout.save()
            rollout.abort_flag.unlink(missing_ok=True)
    except RuntimeError:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Rollout.load(rollout.path).status == RUNNING:
            time.sleep(0.5)  # the running controller ends it at its next step
