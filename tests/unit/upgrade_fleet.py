"""A simulated GPU fleet for the rollout's chaos tests (tests/unit/test_upgrade_chaos.py), moved to a new driver,
ROCm release or model revision.

The real rollout (k3ops.upgrade: the CLI verbs, the record, the state machine, every step) runs against it; what it
would ask of hosts and of the tools it starts is answered here: SSH sessions (k3ops.remote.on_targets), pyinfra's
deploy (a process of its own, which outlives a controller killed alone), the host checks, the fabric check and the
doctor. Hosts take bare metal's time on a virtual clock: a deploy installs for minutes, then reboots for ten, and a
rebooting host does not answer. Every move the controller makes (a command, a fact, a second of a wait) is counted,
so that a test can kill it at any of them: `Killed` ends the controller's process there, and with `whole_group`
the deploy it started dies with it.
"""

from __future__ import annotations

import gzip
import json
import shlex
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

from k3ops.deploys.nvidia import release_package_version
from k3ops.deploys.rocm import release_number
from k3ops.facts.amd import AmdgpuModule, RocmVersion
from k3ops.facts.apt import AptHeldPackages, AptPolicyVersion
from k3ops.facts.boot import BootId
from k3ops.facts.checkpoint import ModelCheckpoints
from k3ops.facts.engine import EngineMetrics, EngineState
from k3ops.facts.gpu_health import DcgmDiag
from k3ops.facts.maintenance import MaintenanceMarker
from k3ops.facts.nvidia import NvidiaKernelModule, NvSwitches
from k3ops.facts.units import UnitStates
from k3ops.onhost import layout
from k3ops.remote import CommandFailed, HostResult
from k3ops.upgrade import record, releases, rollout, steps
from k3ops.upgrade.machine import IN_FLIGHT, State

from ..conftest import cli

INSTALL_SECONDS = 240  # a GPU host deploy up to its reboot
RERUN_SECONDS = 60  # one that finds everything installed
REBOOT_SECONDS = 600  # bare metal: firmware and memory training
STAGE_SECONDS = 60
ENGINE_START_SECONDS = 120
CHECK_SECONDS = 30  # the host checks, the fabric check, the doctor
DEPLOY_LOOK_SECONDS = 30  # how often a controller waiting on its deploy is counted as a move
EPOCH = 1_796_000_000.0  # the virtual clock's time() at 0
OLD, NEW = "580.105.08", "580.126.09"
CLUSTERS = {"h200-a": ["gpu-01", "gpu-02"], "h200-b": ["gpu-03", "gpu-04"], "h200-c": ["gpu-05", "gpu-06"]}
BUDGET = 2  # --max-unavailable: one 2-node group at a time
# An AMD fleet: three MI355X hosts, each serving alone, moved between two ROCm releases, each with its amdgpu.
AMD_OLD, AMD_NEW = "7.0.2", "7.1.0"
AMDGPU = {AMD_OLD: "6.14.14", AMD_NEW: "6.16.6"}
AMD_HOSTS = {name: [name] for name in ("gpu-01", "gpu-02", "gpu-03")}
AMD_BUDGET = 1
WAY = ("pending", *sorted(IN_FLIGHT, key=list(State).index))  # the states a group passes through, in order
DIGEST = "sha256:" + "a" * 64
MODEL = {"repo_id": "moonshotai/Kimi-K3", "revision": "0123456789abcdef0123456789abcdef01234567", "name": "kimi-k3"}
# A fleet of four B300 hosts, each serving alone, moved from MODEL's revision to REVISION: the release a host
# runs is the revision active in its cache (`installed`) and the one its engine loaded at its last start (`loaded`).
REVISION = "89abcdef" * 5
MODEL_HOSTS = {name: [name] for name in ("gpu-01", "gpu-02", "gpu-03", "gpu-04")}
MODEL_BUDGET = 1
STAGE_MODEL, SWITCH_MODEL = releases.MODEL_REVISION.stage_deploy, releases.MODEL_REVISION.switch_deploy


def amdgpu_dkms_version(release: str) -> str:
    return f"1:{AMDGPU[release]}.{release_number(release)}-1"


def stanza(name: str, version: str) -> str:
    return f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nFilename: ./{name}_{version}_amd64.deb\n\n"


PACKAGES = "".join([*(stanza(name, f"{version}-1") for name in ("nvidia-driver", "nvidia-open")
                      for version in (OLD, NEW)),
                    *(stanza("amdgpu-dkms", amdgpu_dkms_version(release)) for release in AMDGPU),
                    *(stanza("rocm", f"{release}.{release_number(release)}-1") for release in AMDGPU)])


class Killed(BaseException):
    """The controller's process died here (BaseException: no step catches it, as none catches SIGKILL)."""


@dataclass
class Host:
    name: str
    installed: str  # the release installed (and held)
    loaded: str  # the release of the loaded module
    boot: int = 1
    up_at: float = 0.0  # answers again from then (a reboot in progress)
    engine_enabled: bool = True
    engine_since: float | None = -ENGINE_START_SECONDS  # when the engine started (None: stopped): serving
    marker: dict | None = None
    staged: set[str] = field(default_factory=set)  # model revisions staged beside the active one
    cannot_load: str | None = None  # a model revision its engine fails to start on (a bad file, a wrong recipe)


@dataclass
class Deploy:
    """A pyinfra deploy the controller started: `function` on `hosts` at `version`, from `begun` to `ends`."""

    pid: int
    function: str
    version: str
    hosts: list[str]
    begun: float
    ends: float
    installed: bool = False
    killed: bool = False

    @property
    def started(self) -> str:
        return str(self.pid * 7)  # what process_start reads for it while it runs


@dataclass
class Fleet:
    hosts: dict[str, Host]
    clusters: dict[str, list[str]]  # each engine group's hosts: it serves whole or not at all
    upgrade: tuple[str, str, int] = ("driver", NEW, BUDGET)  # `k3ops upgrade` verb, --to, --max-unavailable
    inventory: str = ""  # the fleet's inventory file
    record_path: Path | None = None  # the rollout's record, read to know the state each move was made in
    clock: float = 0.0
    moves: int = 0
    kill_at: int | None = None
    whole_group: bool = True
    dead: bool = False
    states: list[str] = field(default_factory=list)  # the in-flight state at each move ("pending": none)
    rebooting: list[bool] = field(default_factory=list)  # whether a host was in a reboot at each move
    worst: int = 0  # the most hosts out of service at once
    deploys: dict[int, Deploy] = field(default_factory=dict)

    @classmethod
    def of(cls, clusters: dict[str, list[str]], version: str, upgrade: tuple[str, str, int]) -> Fleet:
        return cls({name: Host(name, version, version) for names in clusters.values() for name in names}, clusters,
                   upgrade)

    # The controller's moves, and its death.

    def move(self) -> None:
        if self.dead:
            raise Killed()
        self.moves += 1
        self.states.append(self.in_flight())
        self.rebooting.append(any(not self.up(host) for host in self.hosts.values()))
        self.watch()
        if self.moves == self.kill_at:
            self.dead = True
            for deploy in self.deploys.values():
                deploy.killed = deploy.killed or (self.whole_group and self.clock < deploy.ends)
            raise Killed()

    def revive(self) -> None:
        """A new controller (`k3ops upgrade resume`), at once: a host rebooting is still rebooting."""
        self.dead, self.kill_at = False, None

    def in_flight(self) -> str:
        try:
            groups = json.loads(self.record_path.read_text())["groups"]
        except (AttributeError, OSError, ValueError):
            return "pending"
        return next((group["state"] for group in groups if group["state"] not in ("pending", "done", "held")),
                    "pending")

    # The virtual clock, as the steps and the record read it.

    def monotonic(self) -> float:
        return self.clock

    def time(self) -> float:
        return EPOCH + self.clock

    def sleep(self, seconds: float) -> None:
        self.move()
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.clock += seconds
        for deploy in self.deploys.values():
            if not deploy.killed and not deploy.installed and self.clock >= deploy.ends \
                    and deploy.function in (STAGE_MODEL, SWITCH_MODEL):
                deploy.installed = True
                for host in map(self.hosts.get, deploy.hosts):
                    if deploy.function == STAGE_MODEL:
                        host.staged.add(deploy.version)
                    else:  # the switch: a revision never staged would be a download on a drained host
                        assert deploy.version in host.staged | {host.installed, MODEL["revision"]}, deploy
                        host.installed = deploy.version
            if not deploy.killed and not deploy.installed and self.clock >= deploy.begun + INSTALL_SECONDS \
                    and deploy.function == releases.GPU_HOST_DEPLOY:
                deploy.installed = True
                for host in map(self.hosts.get, deploy.hosts):
                    host.installed = deploy.version
                    if host.loaded != deploy.version:  # the deploy reboots it onto the new module
                        host.up_at = deploy.begun + INSTALL_SECONDS + REBOOT_SECONDS
        for host in self.hosts.values():
            if host.up_at and self.clock >= host.up_at:  # a new boot: the installed module, the engine if enabled
                host.engine_since = host.up_at if host.engine_enabled else None
                host.up_at, host.boot, host.loaded = 0.0, host.boot + 1, host.installed
        self.watch()

    # What the fleet serves.

    def up(self, host: Host) -> bool:
        return not host.up_at

    def ready(self, host: Host) -> bool:
        return self.up(host) and host.engine_since is not None and host.loaded == host.installed \
            and host.loaded != host.cannot_load and self.clock >= host.engine_since + ENGINE_START_SECONDS

    def out_of_service(self) -> list[str]:
        return [name for names in self.clusters.values()
                if not all(self.ready(self.hosts[name]) for name in names) for name in names]

    def watch(self) -> None:
        self.worst = max(self.worst, len(self.out_of_service()))

    # SSH sessions: k3ops.remote.on_targets.

    def on_targets(self, chosen: list, action) -> list[HostResult]:
        results = []
        for target in chosen:
            self.move()
            host = self.hosts[target.name]
            if not self.up(host):
                results.append(HostResult(target.name, target.data, error="cannot connect: timed out"))
                continue
            try:
                results.append(HostResult(target.name, target.data, value=action(Remote(self, host, target.data))))
            except CommandFailed as error:
                results.append(HostResult(target.name, target.data, error=str(error)))
        return results

    # The processes the controller starts: pyinfra's deploys, the host checks.

    def popen(self, command: list[str], **_) -> Process:
        self.move()
        function = command[command.index("-y") + 2]
        version = data_version(command)
        hosts = [command[index + 1] for index, word in enumerate(command) if word == "--limit"]
        running = [name for deploy in self.deploys.values() if self.process_start(deploy.pid) for name in deploy.hosts
                   if name in hosts]
        assert not running, f"a second deploy started on {running} beside one still running"
        if function.endswith((".staged_driver", ".staged_release")) or function == STAGE_MODEL:
            ends = self.clock + STAGE_SECONDS
        elif function == SWITCH_MODEL:
            ends = self.clock + RERUN_SECONDS
        elif all({self.hosts[name].installed, self.hosts[name].loaded} == {version} for name in hosts):
            ends = self.clock + RERUN_SECONDS
        else:
            reboots = any(self.hosts[name].loaded != version for name in hosts)
            ends = self.clock + INSTALL_SECONDS + (REBOOT_SECONDS + DEPLOY_LOOK_SECONDS if reboots else 0)
        deploy = Deploy(1000 + len(self.deploys), function, version, hosts, self.clock, ends)
        self.deploys[deploy.pid] = deploy
        return Process(self, deploy)

    def process_start(self, pid: int) -> str | None:
        deploy = self.deploys.get(pid)
        return deploy.started if deploy and not deploy.killed and self.clock < deploy.ends else None

    def run(self, command: list[str], **_) -> SimpleNamespace:
        """The host checks of the driver (`k3ops check` as validation runs it)."""
        self.move()
        self.advance(CHECK_SECONDS)
        version = data_version(command)
        hosts = [command[index + 1] for index, word in enumerate(command) if word == "--limit"]
        # A model's checks look at the cache's active revision; the engine that loads it starts after them.
        runs = (lambda host: {host.installed}) if self.upgrade[0] == "model" else \
            (lambda host: {host.loaded, host.installed})
        failed = [f"FAILED {name}: runs {self.hosts[name].loaded}, installed {self.hosts[name].installed}"
                  for name in hosts if not self.up(self.hosts[name]) or runs(self.hosts[name]) != {version}]
        return SimpleNamespace(returncode=1 if failed else 0, stdout="\n".join(failed), stderr="")

    def fabric_check(self, inventory: str, limit: list[str], data: dict) -> SimpleNamespace:
        """The fabric check's verdict: its idle pre-check refuses a host whose engine runs."""
        self.move()
        self.advance(CHECK_SECONDS)
        failures = {name: [f"{name}: the engine is running (the check wants the GPUs idle)"]
                    for name in limit if self.hosts[name].engine_since is not None}
        failures.update({name: [f"{name}: does not answer"] for name in limit if not self.up(self.hosts[name])})
        return SimpleNamespace(passed=not failures, host_failures=lambda name: failures.get(name, []))

    def doctor(self, inventory: str, limit: list[str], data: dict) -> list[SimpleNamespace]:
        self.move()
        self.advance(CHECK_SECONDS)
        found = []
        for name in limit:
            host = self.hosts[name]
            problems = [] if self.ready(host) else [SimpleNamespace(runbook="engine-not-running",
                                                                    summary="the engine does not answer")]
            found.append(SimpleNamespace(host=name, error=None if self.up(host) else "cannot connect",
                                         findings=problems, unchecked=[]))
        return found

    def install(self, monkeypatch) -> None:
        """Put this fleet where the rollout reaches hosts, starts tools, reads the time and saves its record (a
        dead controller's `finally` saves nothing: SIGKILL runs none)."""
        tools = SimpleNamespace(Popen=self.popen, run=self.run, STDOUT=subprocess.STDOUT,
                                TimeoutExpired=subprocess.TimeoutExpired)
        save = record.Rollout.save

        def saved(rollout) -> None:
            if self.dead:
                raise Killed()
            save(rollout)

        monkeypatch.setattr(record.Rollout, "save", saved)
        for module, name, value in ((steps, "subprocess", tools), (steps, "time", self), (record, "time", self),
                                    (steps, "on_targets", self.on_targets), (rollout, "on_targets", self.on_targets),
                                    (steps, "process_start", self.process_start),
                                    (steps, "run_check", self.fabric_check), (steps, "run_doctor", self.doctor)):
            monkeypatch.setattr(module, name, value)


def data_version(command: list[str]) -> str:
    """The release a deploy or check is run at: its `--data` value (a model's revision, in the model's data)."""
    value = json.loads(command[command.index("--data") + 1].split("=", 1)[1])
    return value["revision"] if isinstance(value, dict) else value


@dataclass
class Process:
    """A deploy as the controller holds it (subprocess.Popen's part that steps.pyinfra uses)."""

    fleet: Fleet
    deploy: Deploy

    @property
    def pid(self) -> int:
        return self.deploy.pid

    def wait(self, timeout: float | None = None) -> int:
        while self.fleet.clock < self.deploy.ends:
            self.fleet.move()
            self.fleet.advance(min(DEPLOY_LOOK_SECONDS, self.deploy.ends - self.fleet.clock))
        return 0


class Remote:
    """One simulated host over SSH (k3ops.remote.RemoteHost's part that the rollout uses)."""

    def __init__(self, fleet: Fleet, host: Host, data: dict):
        self.fleet, self.host, self.name, self.data = fleet, host, host.name, data

    def get_fact(self, fact, **arguments):
        self.fleet.move()
        host, fleet = self.host, self.fleet
        running = host.engine_since is not None
        answers = {
            MaintenanceMarker: lambda: host.marker,
            BootId: lambda: f"boot-{host.boot}",
            NvidiaKernelModule: lambda: {"version": host.loaded},
            NvSwitches: lambda: ["0000:05:00.0"],
            AmdgpuModule: lambda: AMDGPU[host.loaded],
            RocmVersion: lambda: f"{host.installed}-1",
            AptHeldPackages: lambda: HeldEverything(),
            AptPolicyVersion: lambda: {"installed": amdgpu_dkms_version(host.installed)
                                       if arguments["package"] == "amdgpu-dkms" else
                                       release_package_version(host.installed)},
            UnitStates: lambda: {unit: {"active": "active" if running else "inactive"} for unit in arguments["units"]},
            EngineMetrics: lambda: {"requests_running": 0.0, "requests_waiting": 0.0, "kv_cache_usage": 0.0},
            EngineState: lambda: {"ready": fleet.ready(host), "detail": "healthy" if fleet.ready(host) else "starting",
                                  "generation": {"answered": fleet.ready(host)},
                                  "revision": f"/srv/k3ops/models/{MODEL['name']}/revisions/{host.loaded}"},
            ModelCheckpoints: lambda: {MODEL["name"]: {"active": host.installed}},
            DcgmDiag: lambda: {"exit_status": 0, "tests": {}},
        }
        return answers[fact]()

    def check_output(self, command: str) -> str:
        self.fleet.move()
        host = self.host
        if " flock " in command:  # maintenance.compare_and_set: `if STILL; then COMMAND; else ...; fi`
            still, command = shlex.split(command)[-1].removeprefix("if ").split("; else ")[0].split("; then ")
            absent, words = still.startswith("! test -e"), shlex.split(still)
            assert absent or words[:2] == ["grep", "-qF"], still  # no marker read, or a rollout's by its id
            if not (host.marker is None if absent else host.marker is not None and words[2] in json.dumps(host.marker)):
                raise CommandFailed("the maintenance marker changed since it was read")
        if layout.MAINTENANCE_MARKER in command and command.startswith("printf"):
            host.marker = json.loads(shlex.split(command)[2])
        elif command == f"rm -f {layout.MAINTENANCE_MARKER}":
            host.marker = None
        elif "systemctl disable --now" in command:
            host.engine_enabled, host.engine_since = False, None
        elif "systemctl enable --now" in command:
            host.engine_enabled = True
            if host.engine_since is None:
                host.engine_since = self.fleet.clock
                if self.fleet.upgrade[0] == "model":  # the engine loads the active revision as it starts
                    host.loaded = host.installed
        elif "systemctl stop" in command or command == "dpkg --configure -a":
            pass
        else:
            raise AssertionError(f"the simulated host does not know {command!r}")
        return ""

    def run(self, command: str) -> tuple[bool, str, str]:
        """The watchdog's wait for a ready engine."""
        self.fleet.move()
        assert command.startswith(layout.WATCHDOG_COMMAND + " --wait"), command
        if self.host.engine_since is None:
            return False, "", "the engine is not running"
        if self.host.loaded == self.host.cannot_load:
            return False, "", f"not ready: the engine failed to load {self.host.loaded}"
        self.fleet.advance(max(self.host.engine_since + ENGINE_START_SECONDS - self.fleet.clock, 0))
        return True, "", ""


class HeldEverything:
    """apt's held packages on a simulated host: the deploy holds what it installs."""

    def __contains__(self, package: str) -> bool:
        return True


@contextmanager
def cuda_index(directory: Path) -> Iterator[str]:
    """A flat apt repository's index (Packages.gz: the drivers OLD and NEW, and the ROCm releases AMD_OLD and
    AMD_NEW), served over HTTP on loopback: the controller reads it before a rollout starts."""
    served = directory / "repo"
    served.mkdir()
    (served / "Packages.gz").write_bytes(gzip.compress(PACKAGES.encode()))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


class Fleets:
    """New simulated fleets in one inventory (`repository`: the index's URL), each with a controller state of its own
    under `directory`: NVIDIA's CLUSTERS on OLD, moved to NEW by `k3ops upgrade driver`, (`amd`) AMD_HOSTS on ROCm
    AMD_OLD, moved to AMD_NEW by `k3ops upgrade rocm`, or (`model`) MODEL_HOSTS serving MODEL's revision, moved to
    REVISION by `k3ops upgrade model`."""

    def __init__(self, directory: Path, repository: str, monkeypatch, amd: bool = False, model: bool = False):
        self.directory, self.monkeypatch, self.made, self.amd, self.model = directory, monkeypatch, 0, amd, model
        source = {"url": repository, "key_url": repository + "key.gpg"}
        common = {"allow_plain_http": True, "upgrade_soak_seconds": 30, "model": MODEL}
        if model:
            entries = [(name, {"ssh_hostname": f"192.0.2.{index}", **common, "hardware_profile": "b300x8",
                               "nvidia_driver_version": OLD, "repositories": {"cuda": source},
                               "engine": {"recipe": "vllm-b300x8", "image_digest": DIGEST}})
                       for index, name in enumerate(MODEL_HOSTS, 10)]
        elif amd:
            entries = [(name, {"ssh_hostname": f"192.0.2.{index}", **common, "hardware_profile": "mi355x8",
                               "rocm_release": AMD_OLD, "repositories": {"amdgpu": source, "rocm": source},
                               "engine": {"recipe": "vllm-mi355x8", "image_digest": DIGEST}})
                       for index, name in enumerate(AMD_HOSTS, 10)]
        else:
            entries = [(name, {"ssh_hostname": f"192.0.2.{index}", **common, "hardware_profile": "h200x8",
                               "nvidia_driver_version": OLD, "repositories": {"cuda": source},
                               "engine": {"recipe": "vllm-h200x8-2node", "image_digest": DIGEST, "cluster": cluster}})
                       for index, (cluster, name) in enumerate(((cluster, name) for cluster, names in CLUSTERS.items()
                                                                for name in names), 10)]
        self.inventory = directory / "fleet.py"
        self.inventory.write_text(f"gpus = {entries!r}\n")

    def new(self) -> Fleet:
        self.made += 1
        self.monkeypatch.setenv("XDG_STATE_HOME", str(self.directory / f"state-{self.made}"))
        if self.model:
            fleet = Fleet.of(MODEL_HOSTS, MODEL["revision"], ("model", REVISION, MODEL_BUDGET))
        elif self.amd:
            fleet = Fleet.of(AMD_HOSTS, AMD_OLD, ("rocm", AMD_NEW, AMD_BUDGET))
        else:
            fleet = Fleet.of(CLUSTERS, OLD, ("driver", NEW, BUDGET))
        fleet.inventory, fleet.record_path = str(self.inventory), record.record_path(str(self.inventory))
        fleet.install(self.monkeypatch)
        return fleet


def rolled(fleet: Fleet, kill_at: int | None = None, whole_group: bool = True) -> int:
    """`k3ops upgrade driver|rocm|model` to the fleet's new release, killed at move `kill_at`; then, if it was,
    `k3ops upgrade resume`."""
    fleet.kill_at, fleet.whole_group = kill_at, whole_group
    verb, to, budget = fleet.upgrade
    try:
        return cli("upgrade", verb, fleet.inventory, "--to", to, "--max-unavailable", str(budget)).returncode
    except Killed:
        fleet.revive()
        return cli("upgrade", "resume", fleet.inventory).returncode


def kill_points(clean: Fleet, state: str) -> dict[str, int]:
    """The uninterrupted run's first, a middle and its last move in `state`, over the whole rollout."""
    moves = [index + 1 for index, found in enumerate(clean.states) if found == state]
    return {"first": moves[0], "middle": moves[len(moves) // 2], "last": moves[-1]}


def reboot_points(clean: Fleet) -> dict[str, int]:
    """The uninterrupted run's first and last move while a host was in a reboot."""
    moves = [index + 1 for index, down in enumerate(clean.rebooting) if down]
    return {"first": moves[0], "last": moves[-1]}
