"""What each state of a group's upgrade does to its hosts. Every step can run again (a resumed rollout reruns
the step it was in): each reads the hosts' state first and does only what is left.

The hosts are reached as the status commands reach them (k3ops.remote), with the group's release (releases.py) laid
over the inventory's data (`pyinfra --data`), so the deploy, the host checks, the fabric check and the doctor
all judge the host against the version it is moving to.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock

from .. import host_checks
from ..doctor.diagnose import run_doctor
from ..engines.units import engine_urls
from ..facts.boot import BootId
from ..facts.engine import EngineMetrics, EngineState
from ..facts.maintenance import MaintenanceMarker
from ..facts.units import UnitStates
from ..inventory import SshTarget, selected
from ..maintenance import compare_and_set, foreign, marker, owner
from ..nccl.check import run_check
from ..onhost import layout
from ..owned_files import replace_with
from ..remote import on_targets
from ..settings import host_settings, node_rank, settings_of
from . import releases
from .machine import Group, State, serves
from .record import Rollout, now

DEPLOY_TIMEOUT_SECONDS = 3 * 3600
# A marker is believed for as long as its state's step may take (marker_seconds), and this much more.
MARKER_GRACE_SECONDS = 900
VALIDATION_SECONDS = 1800  # the host checks, the fabric check and the doctor, besides the engine's own start
LB_COMMAND_TIMEOUT_SECONDS = 120
POLL_SECONDS = 5
OUTPUT_LINES = 15
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class StepFailed(RuntimeError):
    pass


class Aborted(Exception):
    """`k3ops upgrade abort` asked for the rollout to stop: a step that waits stops waiting, its group left in the
    state it was in, as between steps."""


@dataclass
class Run:
    """One controller's work on a rollout: the record, where tool output goes, and what it prints."""

    rollout: Rollout
    log: Path
    controller: str = field(default_factory=lambda: f"{getpass.getuser()}@{socket.gethostname()}")
    lock: Lock = field(default_factory=Lock)
    loaded: dict = field(default_factory=dict)  # (hosts, version): the inventory's hosts, read once

    def hosts(self, group: Group) -> list:
        """The group's pyinfra hosts, with the group's version over their data (validated, as any command's);
        the inventory file is executed once per group and version, not at every poll."""
        key = (tuple(group["hosts"]), group["to"])
        with self.lock:
            if key not in self.loaded:
                self.loaded[key] = selected(self.inventory, list(group["hosts"]), self.release.data(group["to"]))
            return self.loaded[key]

    @property
    def inventory(self) -> str:
        return self.rollout.record["inventory"]

    @property
    def release(self) -> releases.Release:
        return releases.of(self.rollout.record)

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def move(self, group: Group, state: str, detail: str = "") -> None:
        with self.lock:
            self.rollout.move(group, state, detail)
        self.say(f"{group['name']}: {state}{': ' + detail if detail else ''}")

    def save(self) -> None:
        with self.lock:
            self.rollout.save()

    def pause(self, seconds: float) -> None:
        """A step's wait between two looks at its hosts, cut short by an abort (a drain, a reboot or a soak may
        last hours)."""
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            if self.rollout.abort_flag.exists():
                raise Aborted()
            time.sleep(min(1.0, max(ends - time.monotonic(), 0)))


def on_group(run: Run, group: Group, action) -> dict:
    """`action(remote, data)` on every host of the group at once; any host that fails it fails the step."""
    chosen = run.hosts(group)
    hosts = {host.name: host.data.dict() for host in chosen}
    results = on_targets([SshTarget.of(host) for host in chosen], lambda remote: action(remote, hosts[remote.name]))
    failures = [f"{result.host}: {result.error}" for result in results if result.error is not None]
    if failures:
        raise StepFailed("; ".join(failures))
    return {result.host: result.value for result in results}


def heads(run: Run, group: Group) -> list[str]:
    """The hosts of the group that serve HTTP (rank 0)."""
    hosts = run.hosts(group)
    fleet = [(member.name, member.data.dict()) for member in hosts[0].inventory]
    return [host.name for host in hosts if node_rank(host.name, fleet) == 0]


def engine_of(data: dict):
    return settings_of(data).engine.engine


def write_marker(run: Run, remote, group: Group, state: State, detail: str = "") -> None:
    """The host's maintenance marker, replaced by rename: the rollout's id, this controller, the group's state, and
    a deadline (marker_seconds) past which the doctor reports the host as left out of service. Written only over
    no marker or this rollout's, and only if it is still the one read (compare_and_set): of two controllers that
    read it at once, one takes the host and the other's step fails."""
    read = remote.get_fact(MaintenanceMarker)
    if foreign(read, run.rollout.owns):
        raise StepFailed(f"{remote.name}: taken out of service by {owner(read)} during the rollout "
                         f"({read.get('reason', '?')}): left to them, never overwritten")
    found = marker(f"{run.release.label} upgrade to {group['to']}", state, group.get("marked") or now(),
                   marker_seconds(run, group, state), rollout=run.rollout.id, controller=run.controller,
                   group=group["name"], **({"detail": detail} if detail else {}))
    remote.check_output(compare_and_set(read, replace_with(layout.MAINTENANCE_MARKER, f"{json.dumps(found)}\n",
                                                             "644")))


def marker_seconds(run: Run, group: Group, state: State) -> float | None:
    """How long a marker written on entering `state` holds: the longest that state's step may take, and
    MARKER_GRACE_SECONDS (an upgrade's marker lasts through its deploy's reboot). A failed one has no deadline:
    it waits for a person."""
    if state == State.FAILED:
        return None
    settings = [host_settings(host) for host in run.hosts(group)]
    ready = max((setting.engine.engine.ready_timeout_seconds for setting in settings if setting.engine.engine),
                default=0)
    upgrade = [setting.upgrade for setting in settings]
    limits = {State.DRAINING: max(each.upgrade_lb_settle_seconds + each.upgrade_drain_timeout_seconds
                                  for each in upgrade),
              State.UPGRADING: DEPLOY_TIMEOUT_SECONDS + max(setting.gpu.reboot_timeout_seconds for setting in settings),
              State.VALIDATING: VALIDATION_SECONDS + ready,
              State.SOAKING: VALIDATION_SECONDS + max(each.upgrade_soak_seconds for each in upgrade)}
    return limits.get(state, 0) + MARKER_GRACE_SECONDS


def mark(run: Run, group: Group, state: State) -> None:
    group.setdefault("marked", now())
    on_group(run, group, lambda remote, data: write_marker(run, remote, group, state))


class BalancerSilent(Exception):
    """A load balancer command that could not run, or did not end within LB_COMMAND_TIMEOUT_SECONDS."""


def balancer_command(which: str, name: str, data: dict) -> subprocess.CompletedProcess | None:
    """The site's load balancer command `which` (deregister, register, status) for one host, run on the controller
    (no shell); None when the data sets none."""
    settings = settings_of(data)
    words = settings.upgrade.lb_command(which, name, settings.model.address_for_peers(name))
    if words is None:
        return None
    try:
        return subprocess.run(words, capture_output=True, text=True, timeout=LB_COMMAND_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BalancerSilent(f"the load balancer's {which} command {words[0]} did not answer: {error}") from None


def balancer(run: Run, group: Group, which: str) -> None:
    """Deregister or register each host of the group that serves (a multi-node engine's head; its workers serve
    nothing)."""
    serving = set(heads(run, group))
    for host in [host for host in run.hosts(group) if host.name in serving]:
        try:
            done = balancer_command(which, host.name, host.data.dict())
        except BalancerSilent as error:
            raise StepFailed(f"{host.name}: {error}") from None
        if done is not None and done.returncode != 0:
            raise StepFailed(f"{host.name}: the load balancer's {which} command {done.args[0]} exited "
                             f"{done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")


def off_balancer(name: str, data: dict) -> str | None:
    """Why the site's load balancer sends a serving host no requests, by its status command (None: it sends them,
    or no status command is set). A command that cannot run counts as out: unknown is never taken for in."""
    try:
        done = balancer_command("status", name, data)
    except BalancerSilent as error:
        return str(error)
    return None if done is None or done.returncode == 0 else \
        f"not behind the load balancer ({done.args[0]} exited {done.returncode})"


def pyinfra(run: Run, group: Group, function: str) -> None:
    """A packaged deploy on the group's hosts at the group's version, as `pyinfra -y INVENTORY FUNCTION` would
    run it; its output goes to the rollout's log. It runs in a session of its own, its process recorded with
    the group: a controller that dies leaves it running, and the next one waits for it (`awaited`) instead of
    starting a second deploy on the same hosts."""
    command = [sys.executable, "-m", "pyinfra", "-y", run.inventory, function, *data_flag(run, group)]
    for host in group["hosts"]:
        command += ["--limit", host]
    awaited(run, group)
    with open(run.log, "a") as log:
        log.write(f"\n==> {now()} {group['name']}: {shlex.join(command)}\n")
        log.flush()
        began = log.tell()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        group["deploy"] = {"pid": process.pid, "started": process_start(process.pid)}
        run.save()
        try:
            status = process.wait(timeout=DEPLOY_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise StepFailed(f"{function} did not end within {DEPLOY_TIMEOUT_SECONDS} s (log: {run.log})") from None
        finally:
            group.pop("deploy", None)
            run.save()
    if status != 0:
        with open(run.log, errors="replace") as log:
            log.seek(began)
            tail = [ANSI.sub("", line) for line in log.read().splitlines() if line.strip()][-OUTPUT_LINES:]
        raise StepFailed(f"{function} exited {status} (log: {run.log}): " + " | ".join(tail))


def data_flag(run: Run, group: Group) -> list[str]:
    """pyinfra's `--data` that lays the group's release over the inventory's (a JSON value: pyinfra parses it)."""
    return [word for key, value in run.release.data(group["to"]).items()
            for word in ("--data", f"{key}={json.dumps(value)}")]


def process_start(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat's 22nd field), which tells a pid
    reused by another process from the one recorded; None when no such process runs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def awaited(run: Run, group: Group) -> None:
    """Wait for the deploy a controller before this one started on the group, if it still runs."""
    deploy = group.get("deploy")
    if not deploy:
        return
    deadline = time.monotonic() + DEPLOY_TIMEOUT_SECONDS
    if process_start(deploy["pid"]) == deploy["started"]:
        run.say(f"{group['name']}: waiting for the deploy a controller before this one started (pid {deploy['pid']})")
    while process_start(deploy["pid"]) == deploy["started"]:
        if time.monotonic() > deadline:
            raise StepFailed(f"the deploy of a controller before this one (pid {deploy['pid']}) still runs after "
                             f"{DEPLOY_TIMEOUT_SECONDS} s")
        run.pause(POLL_SECONDS)
    group.pop("deploy")
    run.save()


def stage(run: Run, group: Group) -> None:
    """Download the new release on the group's hosts while they still serve (for a release staged on the whole
    fleet at the start, `group` holds every host of the rollout)."""
    pyinfra(run, group, run.release.stage_deploy)


@serves(State.DRAINING)
def drain(run: Run, group: Group) -> str:
    """Mark the hosts, stop the balancer sending them requests, and wait until their engines have nothing in flight
    (`Drain`)."""
    mark(run, group, State.DRAINING)
    balancer(run, group, "deregister")
    return drained(run, group)


def drained(run: Run, group: Group) -> str:
    """Once the balancer has settled (upgrade_lb_settle_seconds), wait until every serving host of the group has
    nothing in flight, up to upgrade_drain_timeout_seconds."""
    settings = [host_settings(host).upgrade for host in run.hosts(group)]
    run.pause(max(setting.upgrade_lb_settle_seconds for setting in settings))
    watch = Drain(deadline=time.monotonic() + max(setting.upgrade_drain_timeout_seconds for setting in settings))
    serving = set(heads(run, group))
    while True:
        verdict = watch.sample(on_group(run, group, lambda remote, data: in_flight(remote, data)
                                        if remote.name in serving else 0), time.monotonic())
        if verdict:
            return verdict
        run.pause(POLL_SECONDS)


@dataclass
class Drain:
    """When a drain ends: each serving host's requests in flight (running and waiting; None: unknown) sampled
    until every host shows none on QUIET_SAMPLES samples in a row (one zero may fall between two requests), or
    the deadline passes. Unknown is never taken for none: it waits, as a busy host does."""

    deadline: float
    quiet: int = 0
    QUIET_SAMPLES = 2

    def sample(self, found: dict[str, float | None], at: float) -> str | None:
        """The drain's outcome after this sample, or None to sample again."""
        self.quiet = self.quiet + 1 if all(count == 0 for count in found.values()) else 0
        if self.quiet >= self.QUIET_SAMPLES:
            return "no request running or waiting"
        if at > self.deadline:
            busy = {host: "unknown" if count is None else count for host, count in found.items() if count != 0}
            return f"drain timed out with requests in flight ({busy}); the engine's own stop drains the rest"
        return None


def in_flight(remote, data: dict) -> float | None:
    """Requests running and waiting on the host's engine, from its metrics page: 0 when no engine unit runs there,
    None when one runs but its page does not say (unreadable, or slow to answer)."""
    engine = engine_of(data)
    if engine is None:
        return 0
    unit = remote.get_fact(UnitStates, units=[layout.ENGINE_UNIT]).get(layout.ENGINE_UNIT, {})
    if unit.get("active") not in ("active", "reloading", "deactivating"):  # stopped, failed, between restarts
        return 0
    metrics = remote.get_fact(EngineMetrics, metrics_url=engine_urls(engine)["metrics_url"])
    if metrics["requests_running"] is None or metrics["requests_waiting"] is None:
        return None
    return metrics["requests_running"] + metrics["requests_waiting"]


def units_present(units: tuple[str, ...]) -> str:
    """A shell loop over the units that exist on the host (a host without fabric manager has no such unit)."""
    return f"for unit in {' '.join(units)}; do systemctl cat \"$unit\" >/dev/null 2>&1 || continue; "


def stop_engine(remote) -> None:
    """The engine stopped, and kept from starting at boot."""
    remote.check_output(units_present((layout.ENGINE_UNIT,)) + "systemctl disable --now \"$unit\"; done")


@serves(State.STOPPED)
def stop(run: Run, group: Group) -> str:
    """Stop the engine (kept from starting at boot until the group validates) and what holds the GPUs; the
    release each host runs is recorded, for a rollback."""
    def stop_host(remote, data):
        write_marker(run, remote, group, State.STOPPED)
        stop_engine(remote)
        remote.check_output(units_present(run.release.gpu_services) + "systemctl stop \"$unit\"; done")
        return run.release.running(remote)

    loaded = on_group(run, group, stop_host)
    group.setdefault("from", {}).update({host: version for host, version in loaded.items()
                                         if host not in group["from"] and version})
    return f"engine and GPU services stopped; {run.release.label} was " + ", ".join(
        f"{host} {version}" for host, version in group["from"].items())


@serves(State.UPGRADING)
def upgrade(run: Run, group: Group) -> str:
    """The GPU host deploy at the new version: pin, packages, hold and fabric manager together, and its reboot."""
    if "before" not in group:  # each host's boot and module before the deploy: the proof of its reboot
        group["before"] = on_group(run, group, lambda remote, data: boot_and_release(run, remote))
        run.save()
    else:  # resumed: a controller died in this step, its deploy perhaps still running, or rebooting the hosts
        awaited(run, group)
        answering(run, group)

    def prepare(remote, data):
        write_marker(run, remote, group, State.UPGRADING)
        remote.check_output("dpkg --configure -a")  # an install cut short (a controller killed mid-deploy)

    on_group(run, group, prepare)
    pyinfra(run, group, run.release.switch_deploy)
    return f"{run.release.switch_deploy} ran at {group['to']}"


def answering(run: Run, group: Group) -> None:
    """Wait (up to each host's reboot_timeout_seconds) until every host of the group answers: one still in a
    reboot (bare metal takes minutes) is waited for, not failed."""
    deadline = time.monotonic() + max(host_settings(host).gpu.reboot_timeout_seconds for host in run.hosts(group))
    while True:
        try:
            on_group(run, group, lambda remote, data: None)
            return
        except StepFailed as error:
            if time.monotonic() > deadline:
                raise StepFailed(f"not answering within reboot_timeout_seconds: {error}") from None
        run.pause(POLL_SECONDS)


def boot_and_release(run: Run, remote) -> tuple[str, str | None]:
    return remote.get_fact(BootId), run.release.running(remote)


@serves(State.REBOOTING)
def rebooted(run: Run, group: Group) -> str:
    """Wait (up to each host's reboot_timeout_seconds) for each host to answer on a new boot with the new module;
    a host that had the version already needs no new boot, nor does a release that moves without one."""
    if not run.release.reboots:
        return f"no reboot: a {run.release.label} moves without one"
    hosts = {host.name: host.data.dict() for host in run.hosts(group)}
    deadline = time.monotonic() + max(settings_of(data).gpu.reboot_timeout_seconds
                                      for data in hosts.values())
    while True:
        try:
            answers = on_group(run, group, lambda remote, data: boot_and_release(run, remote))
            waiting = [f"{host}: runs {run.release.label} {module}, not {group['to']}" if module != group["to"] else
                       f"{host}: still on the boot before the upgrade"
                       for host, (boot, module) in answers.items()
                       if module != group["to"] or (boot == group["before"][host][0]
                                                    and group["before"][host][1] != group["to"])]
        except StepFailed as error:  # not answering yet: rebooting
            waiting = [str(error)]
        if not waiting:
            return f"new boot on {run.release.label} {group['to']}"
        if time.monotonic() > deadline:
            raise StepFailed("; ".join(waiting))
        run.pause(POLL_SECONDS)


@serves(State.VALIDATING)
def validate(run: Run, group: Group) -> str:
    """The release's host checks, its vendor's quick diagnostic (DCGM's), the fabric check on the group alone, the
    engine ready and answering, and the doctor clean; then back behind the load balancer."""
    def marked_and_stopped(remote, data):  # resumed after the engine started: the checks want it stopped
        write_marker(run, remote, group, State.VALIDATING)
        stop_engine(remote)

    on_group(run, group, marked_and_stopped)
    limits = [word for host in group["hosts"] for word in ("--limit", host)]
    checks = subprocess.run(host_checks.command(run.inventory, "-q", "--no-header", "-rf", *limits,
                                                *data_flag(run, group), module=run.release.host_checks_module),
                            capture_output=True, text=True, timeout=DEPLOY_TIMEOUT_SECONDS)
    if checks.returncode != 0:
        failed = [line for line in checks.stdout.splitlines() if line.startswith("FAILED")] or \
            checks.stdout.splitlines()[-OUTPUT_LINES:]
        raise StepFailed(f"{run.release.label} host checks failed: " + " | ".join(failed))
    diagnosed = [f"{host}: {failure}" for host, found in on_group(run, group, run.release.diagnosed).items()
                 for failure in found]
    if diagnosed:
        raise StepFailed("the GPU diagnostic failed: " + "; ".join(diagnosed))
    if run.release.checks_fabric:
        fabric = run_check(run.inventory, list(group["hosts"]), run.release.data(group["to"]))
        if not fabric.passed:
            raise StepFailed("fabric check failed: " + "; ".join(
                f"{host}: {', '.join(fabric.host_failures(host))}" for host in group["hosts"]
                if fabric.host_failures(host)) or "fabric check failed")
    on_group(run, group, start_engine)
    serving = set(heads(run, group))
    on_group(run, group, lambda remote, data: generates(remote, data) if remote.name in serving else None)
    on_group(run, group, lambda remote, data: runs_the_release(run, remote, group["to"]))
    problems = doctor_problems(run, group)
    if problems:
        raise StepFailed("the doctor is not clean: " + "; ".join(problems))
    balancer(run, group, "register")
    fabric = "fabric check, " if run.release.checks_fabric else ""
    return f"host checks, diagnostic, {fabric}engine and doctor passed; back behind the load balancer"


def start_engine(remote, data: dict) -> None:
    remote.check_output(units_present((layout.ENGINE_UNIT,)) + "systemctl enable --now \"$unit\"; done")


def generates(remote, data: dict) -> None:
    """Wait until the engine is ready (its ready_timeout_seconds), then ask it for one token."""
    engine = engine_of(data)
    if engine is None:
        return
    urls = releases.state_urls(data)
    wait = [layout.WATCHDOG_COMMAND, "--wait", str(engine.ready_timeout_seconds), "--url", urls["health_url"],
            "--served-name", urls["served_name"], "--models-url", urls["models_url"]]
    ok, out, err = remote.run(shlex.join(wait))
    if not ok:
        raise StepFailed(f"{remote.name}: the engine did not become ready: {(err or out).strip()[-300:]}")
    probe = settings_of(data).doctor.doctor_generation_timeout_seconds
    state = remote.get_fact(EngineState, **urls, chat_url=engine_urls(engine)["chat_url"], probe_seconds=probe)
    if not (state.get("generation") or {}).get("answered"):
        raise StepFailed(f"{remote.name}: no token within {probe} s: {(state.get('generation') or state)}")


def runs_the_release(run: Run, remote, wanted: str) -> None:
    """The host's own record of what it runs (the loaded module, the revision the engine loaded) says `wanted`."""
    running = run.release.running(remote)
    if running != wanted:
        raise StepFailed(f"{remote.name}: runs {run.release.label} {running}, not {wanted}")


def doctor_problems(run: Run, group: Group) -> list[str]:
    """The doctor's findings and unchecked checks on the group's hosts, judged at the group's version."""
    problems = []
    for diagnosis in run_doctor(run.inventory, list(group["hosts"]), run.release.data(group["to"])):
        if diagnosis.error is not None:
            problems.append(f"{diagnosis.host}: {diagnosis.error}")
            continue
        problems += [f"{diagnosis.host}: {finding.runbook}: {finding.summary}" for finding in diagnosis.findings]
        problems += [f"{diagnosis.host}: unchecked {item}" for item in diagnosis.unchecked]
    return problems


@serves(State.SOAKING)
def soak(run: Run, group: Group) -> str:
    """Keep serving for upgrade_soak_seconds, checked every few seconds (`Soak`); then the doctor once more."""
    mark(run, group, State.SOAKING)
    settings = [host_settings(host).upgrade for host in run.hosts(group)]
    end = group["since_epoch"] + max(setting.upgrade_soak_seconds for setting in settings)
    watch = Soak(max_misses=min(setting.upgrade_soak_max_misses for setting in settings))
    serving = set(heads(run, group))
    while True:
        answers = on_group(run, group, lambda remote, data: remote.get_fact(EngineState, **releases.state_urls(data))
                           if remote.name in serving and engine_of(data) else {"ready": True})
        down = watch.sample({host: None if state["ready"] else state.get("detail") for host, state in answers.items()})
        if down:
            raise StepFailed("stopped serving during the soak: " + down)
        for host, misses in watch.misses.items():
            if misses:
                run.say(f"{group['name']}: {host} missed a soak check ({misses} in a row, "
                        f"{watch.max_misses} fail the group)")
        left = end - time.time()
        if left <= 0:
            break
        run.pause(min(POLL_SECONDS, left))
    problems = doctor_problems(run, group)
    if problems:
        raise StepFailed("the doctor is not clean after the soak: " + "; ".join(problems))
    on_group(run, group, lambda remote, data: unmark(run, remote))
    return f"served through the soak on {run.release.label} {group['to']}"


def unmark(run: Run, remote) -> None:
    """The rollout's marker removed; one someone else placed meanwhile is theirs to remove."""
    found = remote.get_fact(MaintenanceMarker)
    if found is not None and not foreign(found, run.rollout.owns):
        remote.check_output(compare_and_set(found, f"rm -f {layout.MAINTENANCE_MARKER}"))


@dataclass
class Soak:
    """When a soak fails: a host that misses `max_misses` checks in a row. A miss or two between answers (a slow
    health page, a blip) is forgiven, as a load balancer's health check forgives it."""

    max_misses: int
    misses: dict[str, int] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    def sample(self, found: dict[str, str | None]) -> str | None:
        """`found`: each host's reason for not serving (None: it serves). The failure, or None to go on."""
        for host, why in found.items():
            self.misses[host] = 0 if why is None else self.misses.get(host, 0) + 1
            if why is not None:
                self.details[host] = why
        failed = [f"{host}: {self.details[host]} ({misses} checks in a row)" for host, misses in self.misses.items()
                  if misses >= self.max_misses]
        return "; ".join(failed) or None


def take_out(run: Run, group: Group, detail: str) -> list[str]:
    """A failed group leaves service and stays out (deregistered, drained when it was serving, engine stopped and
    kept from starting, marked failed) until a person looks: never re-admitted by itself. Returns what could not
    be done."""
    problems = []
    try:
        balancer(run, group, "deregister")
        if group["state"] == State.SOAKING:  # it served requests: those in flight finish before the engine stops
            drained(run, group)
    except StepFailed as error:
        problems.append(str(error))
    except Aborted:
        problems.append("its drain cut short by `k3ops upgrade abort`")

    def park(remote, data):
        write_marker(run, remote, group, State.FAILED, detail)
        stop_engine(remote)

    try:
        on_group(run, group, park)
    except StepFailed as error:
        problems.append(str(error))
    return problems

