"""`k3ops nccl check`: pre-checks on every host, all_reduce on each host alone, then all_reduce and
alltoall across each engine cluster, the host at fault located by pair rounds, and each host's result
written back to it.

Hosts that fail a pre-check or their own test are left out of the tests across hosts, whose failure then
names them; a cluster that fails with healthy-looking hosts is taken apart pair by pair (localize.py).
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..fabric_gate import measured_driver
from ..facts.amd import RocmVersion
from ..facts.fabric_check import SshHostKey
from ..facts.nvidia import NvidiaKernelModule
from ..inventory import SshTarget, selected
from ..onhost import layout
from ..remote import CommandFailed, RemoteHost
from ..facts.reader import FactError
from ..owned_files import replace_with
from ..settings import host_settings
from ..settings.fabric import FabricCheckSpec
from ..settings.host import GpuHostSpec
from . import launch, localize
from .prechecks import Precheck, prechecks
from .results import write_command
from .thresholds import COLLECTIVES, TestKind, threshold
from .verdict import FabricRun, judge

CLUSTER_TESTS: tuple[TestKind, ...] = ("cluster_all_reduce", "cluster_alltoall")


@dataclass
class CheckedHost:
    """One host of the check: how to reach it, its specs, and what the check found."""

    target: SshTarget
    spec: GpuHostSpec
    fabric: FabricCheckSpec
    address: str
    group: str | None  # tested across hosts with the others of its engine cluster (or nccl_group)
    remote: RemoteHost | None = None
    error: str | None = None  # could not be reached or asked
    prechecks: list[Precheck] = field(default_factory=list)
    driver: str | None = None
    host_key: str | None = None

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def healthy(self) -> bool:
        return self.error is None and all(check.passed for check in self.prechecks)

    @property
    def problems(self) -> list[str]:
        """Why it was left out of the tests: unreachable, or its failed pre-checks."""
        found = [self.error] if self.error else []
        return found + [f"{check.name}: {problem}" for check in self.prechecks for problem in check.problems]


@dataclass
class Check:
    """Everything one `k3ops nccl check` found."""

    hosts: dict[str, CheckedHost]
    runs: list[FabricRun] = field(default_factory=list)
    locating_runs: list[FabricRun] = field(default_factory=list)  # the localization's pairs and loopbacks
    localizations: dict[str, localize.Localization] = field(default_factory=dict)  # by cluster

    @property
    def passed(self) -> bool:
        return all(host.healthy for host in self.hosts.values()) and all(run.passed for run in self.runs)

    def host_failures(self, name: str) -> list[str]:
        reasons = self.hosts[name].problems
        reasons += [f"{run.test} on {'+'.join(run.hosts)}: {run.verdict}: {run.reason}" for run in self.runs
                    if name in run.hosts and not run.passed]
        reasons += [f"located at fault in {group}'s failure" for group, found in self.localizations.items()
                    if name in found.at_fault]
        return reasons


def select_hosts(inventory_path: str, limit: list[str] | None, data: dict | None = None) -> list[CheckedHost]:
    """The inventory's GPU hosts (`limit`: names or globs; `data`: overrides, as `pyinfra --data`), validated
    before any host is touched."""
    chosen = []
    for host in selected(inventory_path, limit, data):
        settings = host_settings(host)
        spec, engine, fabric = settings.gpu, settings.engine.engine, settings.fabric
        if spec.gpu_vendor is None:
            continue
        chosen.append(CheckedHost(target=SshTarget.of(host), spec=spec, fabric=fabric,
                                  address=settings.model.address_for_peers(host.name),
                                  group=fabric.nccl_group or (engine.cluster if engine else None)))
    if not chosen:
        raise ValueError(f"no GPU host of {inventory_path} is selected")
    return chosen


def in_parallel(action, items: list) -> list:
    with ThreadPoolExecutor(max_workers=max(len(items), 1)) as pool:
        return list(pool.map(action, items))


def run_check(inventory_path: str, limit: list[str] | None = None, data: dict | None = None) -> Check:
    hosts = select_hosts(inventory_path, limit, data)
    check = Check({host.name: host for host in hosts})
    try:
        in_parallel(connect_and_precheck, hosts)
        reachable = [host for host in hosts if host.error is None]
        in_parallel(lambda host: share_host_keys(host, reachable), [h for h in reachable if h.healthy])
        check.runs += in_parallel(single_host_test, [host for host in reachable if host.healthy])
        passed_alone = {run.hosts[0] for run in check.runs if run.passed}
        clusters = {name: members for name, members in group_clusters(hosts).items() if len(members) > 1}
        for name, members in clusters.items():
            blocked = [member.name for member in members if member.name not in passed_alone]
            if blocked:
                check.runs += [skipped(kind, members, f"{', '.join(blocked)} failed a pre-check or its own test")
                               for kind in CLUSTER_TESTS]
        testable = {name: members for name, members in clusters.items()
                    if all(member.name in passed_alone for member in members)}
        for runs in in_parallel(lambda members: cluster_tests(members), list(testable.values())):
            check.runs += runs
        locate_faults(check, testable)
        in_parallel(lambda host: record(check, host), reachable)
    finally:
        for host in hosts:
            if host.remote is not None:
                host.remote.close()
    return check


def connect_and_precheck(host: CheckedHost) -> None:
    import paramiko

    try:
        host.remote = RemoteHost(host.target, host.target.connect())
        host.prechecks = prechecks(host.remote, host.spec, host.fabric)
        host.host_key = host.remote.get_fact(SshHostKey)
        host.driver = measured_driver(host.spec.gpu_vendor, host.remote.get_fact(NvidiaKernelModule),
                                      host.remote.get_fact(RocmVersion))
    except (OSError, paramiko.SSHException) as error:
        host.error = f"cannot connect: {error}"
    except (CommandFailed, FactError) as error:
        host.error = str(error)


def share_host_keys(host: CheckedHost, hosts: list[CheckedHost]) -> None:
    """The run's known_hosts for the MPI user: the other hosts' keys, as this check just read them."""
    lines = launch.known_hosts({other.address: other.host_key for other in hosts if other.host_key})
    try:
        host.remote.check_output(f"id -u {layout.NCCL_USER} >/dev/null && "
                                 f"{replace_with(layout.NCCL_KNOWN_HOSTS, lines, '644')}")
    except CommandFailed as error:
        host.error = f"no MPI user to run the tests ({error}): deploy deploys/gpu_host.py first"


def group_clusters(hosts: list[CheckedHost]) -> dict[str, list[CheckedHost]]:
    clusters: dict[str, list[CheckedHost]] = {}
    for host in hosts:
        if host.group is not None:
            clusters.setdefault(host.group, []).append(host)
    return clusters


def new_run(kind: TestKind, members: list[CheckedHost]) -> FabricRun:
    head = members[0]
    figure, source = threshold(head.spec.hardware_profile, kind, head.fabric.nccl_thresholds,
                               head.fabric.nccl_baseline, head.fabric.nccl_baseline_fraction)
    return FabricRun(test=kind, hosts=[member.name for member in members], size_bytes=head.fabric.message_bytes,
                   threshold=figure, threshold_source=source)


def skipped(kind: TestKind, members: list[CheckedHost], reason: str) -> FabricRun:
    run = new_run(kind, members)
    run.verdict, run.reason = "fail", f"not run: {reason}"
    return run


def execute(run: FabricRun, head: CheckedHost, command: str) -> FabricRun:
    import paramiko

    try:
        status, output, errors = head.remote.run_status(command)
    except (OSError, EOFError, paramiko.SSHException) as error:  # the head stopped answering
        run.verdict, run.reason = "fail", f"lost {head.name}: {error or type(error).__name__}"
        return run
    return judge(run, status, output, errors, head.fabric.nccl_timeout_seconds)


def single_host_test(host: CheckedHost, nic_loopback: bool = False) -> FabricRun:
    command = launch.single_host("all_reduce", host.spec.gpu_vendor, host.spec.gpu_count, host.fabric, nic_loopback)
    kind = "host_nic_loopback" if nic_loopback else "host_all_reduce"
    return ended(execute(new_run(kind, [host]), host, command), [host])


def across(kind: TestKind, members: list[CheckedHost]) -> FabricRun:
    head = members[0]
    command = launch.across_hosts(COLLECTIVES[kind], head.spec.gpu_vendor, head.spec.gpu_count,
                                  [member.address for member in members], head.fabric)
    return ended(execute(new_run(kind, members), head, command), members)


def ended(run: FabricRun, hosts: list[CheckedHost]) -> FabricRun:
    """After a hang, what the timeout left of the test on every host of it (ranks mpirun could not reach
    hold GPU memory): the MPI user runs nothing else, so all of its processes go."""
    if run.verdict == "hang":
        for host in hosts:
            try:
                host.remote.run(f"pkill -KILL -u {layout.NCCL_USER}")
            except (OSError, EOFError) as error:
                run.reason += f"; could not end its processes on {host.name}: {error}"
    return run


def cluster_tests(members: list[CheckedHost]) -> list[FabricRun]:
    """Each test across the cluster's hosts in turn; after a hang the rest would hang too."""
    runs = []
    for kind in CLUSTER_TESTS:
        hung = next((run for run in runs if run.verdict == "hang"), None)
        runs.append(skipped(kind, members, f"{hung.test} hung") if hung else across(kind, members))
    return runs


def locate_faults(check: Check, clusters: dict[str, list[CheckedHost]]) -> None:
    """For each cluster whose tests failed on healthy hosts: pair its hosts with hosts of passing clusters of
    the same hardware (references), round by round, all of a round's pairs at once."""
    failed = {name: members for name, members in clusters.items()
              if any(not run.passed for run in check.runs if run.hosts == [m.name for m in members])}
    passing = [member for name, members in clusters.items() if name not in failed for member in members]
    for name, members in failed.items():
        kinds = [run.test for run in check.runs if run.hosts == [m.name for m in members] and not run.passed]
        profile = members[0].spec.hardware_profile
        references = [host.name for host in passing if host.spec.hardware_profile == profile]

        def pair_tests(pair: localize.Pair) -> list[FabricRun]:
            """The cluster's failed tests on one pair, up to the first that fails (the pair has failed)."""
            runs = []
            for kind in kinds:
                runs.append(across(kind, [check.hosts[pair[0]], check.hosts[pair[1]]]))
                if not runs[-1].passed:
                    break
            return runs

        def run_pairs(pairs: list[localize.Pair]) -> list[bool]:
            rounds = in_parallel(pair_tests, pairs)
            check.locating_runs += [run for runs in rounds for run in runs]
            return [all(run.passed for run in runs) for runs in rounds]

        names = [member.name for member in members]
        already = [tuple(names)] if len(names) == 2 else []  # the cluster's own run was that pair's test
        found = check.localizations[name] = localize.localize(names, references, run_pairs, failed=already)
        if found.undecided:
            nic_loopbacks(check, found)


def nic_loopbacks(check: Check, found: localize.Localization) -> None:
    """Suspects no reference could settle, each alone through its own NICs: one that falls short is at fault,
    and explains the cluster's failure, so the others are cleared."""
    runs = in_parallel(lambda name: single_host_test(check.hosts[name], nic_loopback=True), found.undecided)
    check.locating_runs += runs
    found.nic_loopback = [(run.hosts[0], run.passed) for run in runs]
    short = [run.hosts[0] for run in runs if not run.passed]
    if short:
        found.at_fault += short
        found.cleared += [name for name in found.undecided if name not in short]
        found.undecided = []


def host_result(check: Check, host: CheckedHost) -> dict:
    """What the host keeps: when, on what, every figure it took part in, and its verdict."""
    runs = [run for run in check.runs if host.name in run.hosts]
    cluster = None
    if host.group is not None:
        members = [name for name, other in check.hosts.items() if other.group == host.group]
        cluster_runs = [run for run in runs if run.test in CLUSTER_TESTS]
        cluster = {"name": host.group, "members": members,
                   "verdict": "pass" if cluster_runs and all(run.passed for run in cluster_runs) else "fail"}
    library = next((run.library_version for run in runs if run.library_version), None)
    tests = next((run.tests_version for run in runs if run.tests_version), None)
    failures = check.host_failures(host.name)
    return {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": host.name,
            "hardware_profile": host.spec.hardware_profile, "driver": host.driver,
            "library": library, "tests_version": tests, "verdict": "fail" if failures else "pass", "reasons": failures,
            "prechecks": [{"name": c.name, "passed": c.passed, "problems": list(c.problems)} for c in host.prechecks],
            "tests": [run.to_json() for run in runs], "cluster": cluster,
            "at_fault": any(host.name in found.at_fault for found in check.localizations.values())}


def record(check: Check, host: CheckedHost) -> None:
    try:
        host.remote.check_output(write_command(json.dumps(host_result(check, host), sort_keys=True)))
    except (OSError, CommandFailed) as error:
        host.error = host.error or f"could not record the result: {error}"


def baseline(check: Check) -> dict[str, dict[str, float]]:
    """The median figure of each passing test, by hardware profile: a fleet's own nccl_baseline."""
    figures: dict[str, dict[str, list[float]]] = {}
    for run in check.runs:
        if run.passed and run.busbw is not None:
            profile = check.hosts[run.hosts[0]].spec.hardware_profile
            figures.setdefault(profile, {}).setdefault(run.test, []).append(run.busbw)
    return {profile: {kind: round(statistics.median(values), 1) for kind, values in kinds.items()}
            for profile, kinds in figures.items()}
