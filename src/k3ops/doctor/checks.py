"""The doctor's checks: each asks the host facts and names the runbook for what it finds.

A check returns findings (something to act on, with its runbook) and notes (worth knowing, needing
nobody: an application's Xid, an engine an operator stopped). Checks that need a working driver run
only once the driver answers, so a host with a broken driver gets one finding, not ten.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..engines.recipes import RECIPES
from ..engines.units import engine_urls
from ..facts.amd import AmdgpuModule
from ..onhost.drivers import amdgpu_differs
from ..facts.apt import AptPolicyVersion
from ..facts.boot import SecureBoot
from ..facts.checkpoint import ModelCheckpoints
from ..facts.engine import EngineState
from ..facts.fabric_check import LastFabricCheck
from ..facts.gpu_health import NvidiaGpuReport, NvlinkLinks
from ..facts.journal import UnitJournal
from ..facts.kernel_log import KernelDriverMismatch, KernelXidEvents
from ..facts.maintenance import MaintenanceMarker
from ..facts.nvidia import NvidiaDriverState, NvidiaGpus, NvidiaKernelModule, NvidiaUserspaceVersion, NvSwitches
from ..facts.units import UnitStates
from ..maintenance import FAILED, LIVE, RUNBOOK, owner, standing
from ..nccl import prechecks
from ..onhost import watchdog
from ..onhost.layout import ENGINE_UNIT, MAINTENANCE_MARKER, WATCHDOG_SERVICE
from ..settings import HostSettings, cluster_members, node_rank, settings_of
from ..vendor_units import FABRIC_MANAGER, PERSISTENCED
from . import log_patterns, xids
from .findings import Finding

FABRIC_MANAGER_UNIT = f"{FABRIC_MANAGER}.service"
PERSISTENCED_UNIT = f"{PERSISTENCED}.service"
JOURNAL_LINES = 300
EVIDENCE_LINES = 5
# What an engine's log says, and the runbook for it; the first that matches is the cause.
ENGINE_LOG_RUNBOOKS = (
    ("no-kv-cache-memory", "engine-oom-at-load"), ("free-memory-at-start", "engine-oom-at-load"),
    ("cuda-oom", "engine-oom-at-load"), ("nccl-timeout", "nccl-init-hang"), ("nccl-error", "nccl-init-hang"),
    ("engine-dead", "engine-not-running"),
)
# Automatic restarts this boot after which an engine that is not ready is looping, not starting: systemd's count
# (NRestarts) is not reset by a manual restart, so one crash and its repair stay below it.
LOOP_RESTARTS = 2
# The watchdog logs a restart just before systemd starts the run it caused.
WATCHDOG_RESTART_LEAD_SECONDS = 30
TOOL_PARSER_FLAG = "--tool-call-parser"
K3_PARSER = "kimi_k3"
STORE_SPACE_MESSAGES = ("not enough space", "No space left on device")
# A fetch's phases that refresh the store's state as they go (a verification hashes for long without a word).
FETCHING_PHASES = ("metadata", "waiting", "downloading")


@dataclass(frozen=True)
class HostSpecs:
    """What the checks read: the host's settings, and its place in its multi-node engine."""

    name: str
    settings: HostSettings
    rank: int = 0
    cluster: tuple[str, ...] = ()  # the hosts of its multi-node engine, head first (empty: it serves alone)

    @classmethod
    def of(cls, name: str, data: dict, fleet: list[tuple[str, dict]]) -> HostSpecs:
        settings = settings_of(data)
        cluster = settings.engine.engine.cluster if settings.engine.engine else None
        return cls(name=name, settings=settings, rank=node_rank(name, fleet),
                   cluster=tuple(cluster_members(cluster, fleet)) if cluster else ())


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    driver_answers: bool = True  # whether the checks that need the GPU driver can run after this one
    maintenance: dict | None = None  # a live marker: someone works on the host, its findings are held back


def maintenance(host, specs: HostSpecs) -> CheckResult:
    """A host left out of service: a failed rollout's marker, or one past its deadline (k3ops.maintenance). A
    live marker is no finding: the doctor holds the host's findings back while someone works on it."""
    found = host.get_fact(MaintenanceMarker)
    if found is None:
        return CheckResult()
    verdict, why = standing(found)
    if verdict == LIVE:
        return CheckResult(maintenance=found)
    summary = f"out of service, marked by {owner(found)}: {why}"
    evidence = [f"{MAINTENANCE_MARKER}: " + ", ".join(f"{key} {value}" for key, value in found.items())]
    return CheckResult(findings=[Finding(RUNBOOK, "critical" if verdict == FAILED else "warning",
                                         "return to service", summary, evidence,
                                         {"MARKER_STATE": str(found.get("state", "-"))})])


def nvidia_driver(host, specs: HostSpecs) -> CheckResult:
    """nvidia-smi answers, and with the version the installed driver has. A host that lists its GPUs has a
    working driver; only one that lists none is asked why."""
    if host.get_fact(NvidiaGpus):
        return CheckResult()
    state = host.get_fact(NvidiaDriverState)
    if state == "ready":
        return CheckResult()
    module, userspace = host.get_fact(NvidiaKernelModule), host.get_fact(NvidiaUserspaceVersion)
    evidence = [f"nvidia-smi: driver state {state}",
                f"loaded kernel module: {module['version'] if module else 'none'}",
                f"installed userspace (libnvidia-ml): {userspace or 'none'}"]
    gpus = {"GPU_COUNT": str(specs.settings.gpu.gpu_count)}
    if state == "mismatch":
        complaint = host.get_fact(KernelDriverMismatch,
                                  since_seconds=specs.settings.doctor.doctor_kernel_log_hours * 3600)
        if complaint:
            evidence.append(f"kernel log: NVRM: API mismatch: the client has the version {complaint[0]}, but this "
                            f"kernel module has the version {complaint[1]}")
        finding = Finding("nvml-driver-mismatch", "critical", "reboot",
                          "Failed to initialize NVML: Driver/library version mismatch (the loaded module is "
                          f"{module['version'] if module else 'unknown'}, the library {userspace})", evidence, gpus)
    elif state == "no-devices":
        finding = Finding("gpu-count-below-spec", "critical", "reboot",
                          f"the driver sees no GPU; the spec names {specs.settings.gpu.gpu_count}", evidence, gpus)
    elif state == "not-installed":
        finding = Finding("nvidia-driver-not-loaded", "critical", "rerun the deploy",
                          "no NVIDIA driver is installed (no nvidia-smi): rerun the deploy", evidence, gpus)
    elif module is None and (refusal := secure_boot_refusal(host, specs, "nvidia", evidence)):
        finding = refusal
    else:
        finding = Finding("nvidia-driver-not-loaded", "critical", "reboot",
                          "nvidia-smi cannot reach the driver: the nvidia module is not loaded", evidence, gpus)
    return CheckResult([finding], driver_answers=False)


def secure_boot_refusal(host, specs: HostSpecs, module: str, evidence: list[str]) -> Finding | None:
    """Secure Boot on and the GPU module, which DKMS built unsigned, not loaded: the kernel refused it."""
    if specs.settings.gpu.signed_kernel_modules or not host.get_fact(SecureBoot):
        return None
    return Finding("secure-boot-blocks-driver", "critical", "reboot",
                   f"Secure Boot is on and the {module} module is not loaded: the kernel refused the unsigned module",
                   [*evidence, "Secure Boot: enabled (the firmware's SecureBoot variable)"],
                   {"MODULE": module, "GPU_COUNT": str(specs.settings.gpu.gpu_count)})


def kernel_xids(host, specs: HostSpecs) -> CheckResult:
    """The Xids of the current boot's window, each by NVIDIA's catalogue; an application's are notes. A
    sympathetic Xid 45 follows the Xid it names, or another on its GPU; alone, the catalogue's solo resolution."""
    events = host.get_fact(KernelXidEvents, since_seconds=specs.settings.doctor.doctor_kernel_log_hours * 3600)
    result = CheckResult()
    gpu_by_pci = {xid_pci(gpu["bus_id"]): gpu["index"] for gpu in host.get_fact(NvidiaGpus)}
    for event in events:
        line = xid_line(event)
        entry = xids.nvlink5_verdict(xids.classify(event["caused_by"] or event["xid"]), event["message"])
        if event["xid"] == xids.SYMPATHETIC_XID and not event["caused_by"]:
            lone = lone_preemptive_cleanup(host, specs, event, events, line, entry)
            result.findings += lone.findings
            result.notes += lone.notes
            continue
        named = f" (named by Xid {event['xid']}: the GPU's own fault)" if event["caused_by"] else ""
        runbook = xids.runbook(entry)
        if runbook is None:  # an application's fault, or a note
            result.notes.append(f"{line}: {entry.meaning}; {entry.action}")
            continue
        if entry.kind == "memory":  # the GPU's memory state now (gpu-memory) decides, not the event: a reset clears it
            result.notes.append(f"{line}: {entry.meaning}{named}; see the gpu-memory check for the GPU's state now")
            continue
        # A GPU off the bus is gone from nvidia-smi: its PCI address is all that names it then.
        variables = {"GPU_PCI": event["pci"], **({"GPU": str(gpu_by_pci[event["pci"].lower()])}
                                                if event["pci"].lower() in gpu_by_pci else {})}
        result.findings.append(Finding(runbook, entry.severity, entry.action,
                                       f"Xid {entry.code}: {entry.meaning}{named}", [line, f"catalogue: {entry.source}"],
                                       variables))
    return result


def lone_preemptive_cleanup(host, specs: HostSpecs, event: dict, events: list[dict], line: str,
                            entry: xids.XidEntry) -> CheckResult:
    """An Xid 45 that names no cause: beside another Xid on its GPU it follows that one; alone, NVIDIA's
    catalogue ties it to fabric manager stopping (solo RESTART_FM), which the unit's state then confirms: not
    active, or started after the Xid. With fabric manager up since before it, or none here, it is what it is
    most days: a process killed while it had work on the GPU (a note)."""
    gpu = f"PCI {event['pci']}"
    others = sorted({other["xid"] for other in events if other["pci"] == event["pci"]
                     and other["xid"] != xids.SYMPATHETIC_XID})
    if others:
        return CheckResult(notes=[f"{line}: {entry.meaning}; it follows Xid {', '.join(map(str, others))} on this GPU"])
    if not specs.settings.gpu.fabric_manager_wanted(bool(host.get_fact(NvSwitches))):
        return CheckResult(notes=[f"{line}: {entry.meaning}; no fabric manager here: a process's context cleaned up "
                                  "as it died"])
    unit = host.get_fact(UnitStates, units=[FABRIC_MANAGER_UNIT]).get(FABRIC_MANAGER_UNIT, {})
    since = event_seconds(event)
    if unit.get("active") == "active" and (since is None or (unit.get("entered") or 0) <= since):
        return CheckResult(notes=[f"{line}: {entry.meaning}; alone, but {FABRIC_MANAGER_UNIT} has run since before "
                                  "it: a process killed while it had work on the GPU"])
    return CheckResult([Finding(
        "fabric-manager-down", "warning", "restart fabric manager",
        f"Xid 45 alone on {gpu} and {FABRIC_MANAGER_UNIT} {unit.get('active', 'missing')}"
        + (" (started after it)" if unit.get("active") == "active" else "")
        + ": NVIDIA's catalogue ties a lone preemptive cleanup to fabric manager stopping",
        [line, f"{FABRIC_MANAGER_UNIT}: {unit_line(unit)}", f"catalogue: {entry.source}"],
        {"UNIT": FABRIC_MANAGER_UNIT})])


def event_seconds(event: dict) -> float | None:
    """An Xid event's time as Unix seconds (a log time without a zone read as UTC); None when the log gave none."""
    try:
        when = datetime.fromisoformat(event["time"])
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def xid_line(event: dict) -> str:
    """One Xid event as evidence: when, the GPU, how often, the driver's words, every process its burst names, and
    whether the driver printed only a sample of them."""
    repeats = f" ({event['count']} times)" if event.get("count", 1) > 1 else ""
    processes = ", ".join(f"{known['process'] or 'pid'} {known['pid'] or ''}".strip()
                          for known in event.get("processes", []))
    sampled = (f"; the driver printed 1 of every {event['printed_one_in']} of these"
               if event.get("printed_one_in") else "")
    return (f"{event['time'] or 'this boot'}: Xid {event['xid']} on PCI {event['pci']}{repeats}: {event['message']}"
            + (f" (processes: {processes})" if processes else "") + sampled)


def xid_pci(bus_id: str) -> str:
    """nvidia-smi's bus id (00000000:18:00.0) as the driver's Xid lines name the GPU (0000:18:00)."""
    return bus_id.lower()[4:-2]


def gpu_index(host, gpu: dict) -> int:
    """The index `nvidia-smi -i` takes for a GPU of an `nvidia-smi -q` report (by its bus id: the report's order
    may differ), or its place in the report."""
    return next((listed["index"] for listed in host.get_fact(NvidiaGpus)
                 if listed["bus_id"].lower() == gpu["bus_id"].lower()), gpu["gpu"])


def gpu_count(host, specs: HostSpecs) -> CheckResult:
    check = prechecks.gpus_visible(host, specs.settings.gpu)
    if check.passed:
        return CheckResult()
    return CheckResult([Finding("gpu-count-below-spec", "critical", "reboot",
                                check.problems[0], list(check.problems),
                                {"GPU_COUNT": str(specs.settings.gpu.gpu_count)})])


def gpu_memory(host, specs: HostSpecs) -> CheckResult:
    """Row remapping and ECC, per GPU: a failed remap is the hardware's end; uncorrectable errors need a reset
    unless the driver contained them (it says so in its Xid 94 line, "RST: No, D-RST: No"); a pending remap
    waits for the next reset, chosen after a drain."""
    result = CheckResult()
    events = host.get_fact(KernelXidEvents, since_seconds=specs.settings.doctor.doctor_kernel_log_hours * 3600)
    for gpu in host.get_fact(NvidiaGpuReport):
        index = gpu_index(host, gpu)
        where = f"GPU {index} ({gpu['bus_id']})"
        variables = {"GPU": str(index)}
        if gpu.get("remap_failure"):
            result.findings.append(Finding(
                "gpu-memory-errors", "critical", "drain and inspect hardware",
                f"{where}: row remapping failed: the GPU is out of spare rows (RMA criteria)",
                [f"{where}: Remapping Failure Occurred: Yes"], variables))
        if (gpu.get("ecc_volatile_uncorrectable") or 0) > 0:
            count = f"{where}: volatile uncorrectable ECC errors: {gpu['ecc_volatile_uncorrectable']}"
            said = [event for event in events if event["pci"].lower() == xid_pci(gpu["bus_id"])
                    and event["xid"] in xids.ECC_XIDS]
            needs = xids.ecc_reset(said)
            lines = [count, *(xid_line(event) for event in said)]
            if needs == "none":
                result.findings.append(Finding(
                    "gpu-memory-errors", "warning", "restart engine",
                    f"{where}: {gpu['ecc_volatile_uncorrectable']} uncorrectable ECC errors, contained by the driver "
                    "(RST: No, D-RST: No): the process that touched the memory died, the GPU needs no reset",
                    lines, variables))
            else:
                result.findings.append(Finding(
                    "gpu-memory-errors", "warning" if needs == "drain" else "critical",
                    "drain, then reset GPU" if needs == "drain" else "reset GPU",
                    f"{where}: {gpu['ecc_volatile_uncorrectable']} uncorrectable ECC errors since the last driver load"
                    + (": the driver recommends a drain and reset" if needs == "drain" else ""), lines, variables))
        if gpu.get("remap_pending"):
            result.findings.append(Finding(
                "gpu-memory-errors", "warning", "drain, then reset GPU",
                f"{where}: a row remap is pending: it takes effect at the GPU's next reset, after a drain",
                [f"{where}: Remapped Rows Pending: Yes"], variables))
    return result


def gpu_conditions(host, specs: HostSpecs) -> CheckResult:
    """What the driver says each GPU needs (its recovery action, the state an Xid 154 announces, and its reset
    status), and the board slowing its clocks on the system's power brake. PCIe replays are a note: nobody
    publishes a count that is too many in one reading; DCGM's health watch judges their rate."""
    result = CheckResult()
    for gpu in host.get_fact(NvidiaGpuReport):
        index = gpu_index(host, gpu)
        where, variables = f"GPU {index} ({gpu['bus_id']})", {"GPU": str(index)}
        said = [line for line in (
            gpu["recovery_action"] and f"{where}: GPU Recovery Action: {gpu['recovery_action']}",
            gpu["reset_required"] and f"{where}: GPU Reset Status: Reset Required: Yes",
            gpu["drain_and_reset_recommended"] and f"{where}: GPU Reset Status: Drain and Reset Recommended: Yes")
            if line]
        if said:
            severity, action = xids.recovery(gpu["recovery_action"], bool(gpu["reset_required"]))
            result.findings.append(Finding("gpu-xid-error", severity, action,
                                           f"{where}: the driver asks for {action}", said, variables))
        if gpu["power_brake"]:
            result.findings.append(Finding(
                "gpu-power-brake", "warning", "drain and inspect hardware",
                f"{where}: the system holds its power brake: the board slows the GPU's clocks",
                [f"{where}: Clocks Event Reasons: HW Slowdown: Active, HW Power Brake Slowdown: Active"], variables))
        if gpu["pcie_replays"] or gpu["pcie_replay_rollovers"]:
            result.notes.append(f"{where}: {gpu['pcie_replays']} PCIe replays since its reset "
                                f"({gpu['pcie_replay_rollovers']} rollovers of the counter)")
    return result


def nvlink(host, specs: HostSpecs) -> CheckResult:
    if not (specs.settings.gpu.board.nvswitch or specs.settings.gpu.board.nvlink_domain):
        return CheckResult()
    down = {gpu: links["inactive"] for gpu, links in host.get_fact(NvlinkLinks).items() if links["inactive"]}
    if not down:
        return CheckResult()
    first = min(down)
    return CheckResult([Finding(
        "nvlink-errors", "critical", "reboot",
        f"{sum(len(links) for links in down.values())} NVLinks inactive on GPU {', '.join(map(str, sorted(down)))}",
        [f"GPU {gpu}: links {', '.join(map(str, links))} inactive" for gpu, links in sorted(down.items())],
        {"GPU": str(first)})])


def nvidia_services(host, specs: HostSpecs) -> CheckResult:
    """Fabric manager where the board needs it (and the fabric it configures), persistenced everywhere."""
    result = CheckResult()
    units = host.get_fact(UnitStates, units=[FABRIC_MANAGER_UNIT, PERSISTENCED_UNIT])
    if specs.settings.gpu.fabric_manager_wanted(bool(host.get_fact(NvSwitches))):
        fabric = prechecks.nvlink_fabric(host, specs.settings.gpu)
        if not fabric.passed:
            journal = host.get_fact(UnitJournal, unit=FABRIC_MANAGER_UNIT, lines=JOURNAL_LINES)
            said = [f"fabric manager log: {line}"
                    for _, line in log_patterns.log_findings(journal, log_patterns.FABRIC_MANAGER_LOG_PATTERNS)]
            state = units.get(FABRIC_MANAGER_UNIT, {})
            # NV_WARN_NOTHING_TO_DO: fabric manager found no NVSwitch it can manage; a restart finds none either.
            nothing = any(re.search(log_patterns.FABRIC_MANAGER_LOG_PATTERNS["nothing-to-do"], line) for line in said)
            result.findings.append(Finding(
                "fabric-manager-down", "critical", "drain and inspect hardware" if nothing else "restart fabric manager",
                "; ".join(fabric.problems) + ("; fabric manager found no NVSwitch to manage (NV_WARN_NOTHING_TO_DO): "
                                              "a restart cannot help" if nothing else ""),
                [*fabric.problems, f"{FABRIC_MANAGER_UNIT}: {unit_line(state)}", *said[-EVIDENCE_LINES:]],
                {"UNIT": FABRIC_MANAGER_UNIT}))
    persistenced = units.get(PERSISTENCED_UNIT, {})
    if persistenced.get("active") != "active":
        result.findings.append(Finding(
            "persistenced-down", "warning", "restart service",
            f"{PERSISTENCED_UNIT} is {persistenced.get('active', 'missing')}: the driver unloads between uses and "
            "every CUDA start pays its initialisation", [f"{PERSISTENCED_UNIT}: {unit_line(persistenced)}"],
            {"UNIT": PERSISTENCED_UNIT}))
    return result


def rdma_ports(host, specs: HostSpecs) -> CheckResult:
    ports, mtu = prechecks.rdma_ports(host, specs.settings.gpu,
                                      specs.settings.fabric.nccl_environment.get("NCCL_IB_HCA"))
    findings = []
    if not ports.passed:
        findings.append(Finding("infiniband-port-degraded", "critical", "drain and inspect hardware",
                                ports.problems[-1], list(ports.problems)))
    if not mtu.passed:
        findings.append(Finding("infiniband-port-degraded", "warning", "drain and inspect hardware",
                                mtu.problems[0], list(mtu.problems)))
    return CheckResult(findings)


def amd_driver(host, specs: HostSpecs) -> CheckResult:
    """amdgpu loaded, at the version of the amdgpu-dkms package ROCm's release installed."""
    loaded = host.get_fact(AmdgpuModule)
    if loaded is None:
        absent = ["/sys/module/amdgpu: absent"]
        return CheckResult([secure_boot_refusal(host, specs, "amdgpu", absent) or Finding(
            "amdgpu-not-loaded", "critical", "reboot", "amdgpu is not loaded: no GPU is usable", absent,
            {"GPU_COUNT": str(specs.settings.gpu.gpu_count)})], driver_answers=False)
    installed = host.get_fact(AptPolicyVersion, package="amdgpu-dkms")["installed"]
    if amdgpu_differs(loaded, installed):
        return CheckResult([Finding(
            "rocm-driver-mismatch", "critical", "reboot",
            f"the loaded amdgpu module is {loaded}, the installed amdgpu-dkms {installed}: ROCm's userspace and "
            "kernel driver differ until the host reboots",
            [f"/sys/module/amdgpu/version: {loaded}", f"amdgpu-dkms installed: {installed}"])])
    return CheckResult()


def xgmi(host, specs: HostSpecs) -> CheckResult:
    check = prechecks.xgmi(host, specs.settings.gpu)
    if check.passed:
        return CheckResult()
    return CheckResult([Finding("xgmi-errors", "critical", "reboot", check.problems[0],
                                list(check.problems))])


def fabric_check(host, specs: HostSpecs) -> CheckResult:
    """The last `k3ops nccl check` on this host: a hang, or a failure this host is to blame for."""
    last = host.get_fact(LastFabricCheck)
    if last is None or last.get("verdict") == "pass":
        return CheckResult()
    members = (last.get("cluster") or {}).get("members") or [specs.name]
    variables = {"HOSTS": ",".join(members)}
    when = f"last fabric check ({last.get('time')})"
    hung = [test for test in last.get("tests", []) if test.get("verdict") == "hang"]
    if hung:
        return CheckResult([Finding(
            "nccl-init-hang", "critical", "drain and inspect hardware",
            f"{when}: {hung[0].get('test')} hung across {', '.join(hung[0].get('hosts', members))}",
            [f"{test.get('test')} on {'+'.join(test.get('hosts', []))}: {test.get('reason')}" for test in hung],
            variables)])
    own = [problem for check in last.get("prechecks", []) for problem in check.get("problems", [])]
    own += [f"{test['test']}: {test.get('reason')}" for test in last.get("tests", [])
            if test.get("verdict") == "fail" and len(test.get("hosts", [])) == 1]
    if last.get("at_fault") or own:
        return CheckResult([Finding("nccl-check-failed", "critical", "drain and inspect hardware",
                                    f"{when} failed on this host: " + "; ".join(last.get("reasons", []))[:300],
                                    last.get("reasons", []) or own, variables)])
    return CheckResult(notes=[f"{when}: its cluster failed, another host was at fault: "
                              + "; ".join(last.get("reasons", []))])


def engine(host, specs: HostSpecs) -> CheckResult:
    """The engine unit: crashed or looping, stuck starting, or up and not generating; its log names why."""
    engine_spec = specs.settings.engine.engine
    state = host.get_fact(UnitStates, units=[ENGINE_UNIT]).get(ENGINE_UNIT, {})
    journal = host.get_fact(UnitJournal, unit=ENGINE_UNIT, lines=JOURNAL_LINES, since=state.get("entered"))
    log_says = dict(log_patterns.log_findings(journal, log_patterns.ENGINE_LOG_PATTERNS))
    result = CheckResult()
    if "tool-call-parse" in log_says or (engine_spec.recipe.startswith(("vllm", "sglang"))
                                     and TOOL_PARSER_FLAG in engine_spec.args
                                     and engine_spec.args[TOOL_PARSER_FLAG] != K3_PARSER):
        result.findings.append(Finding(
            "tool-call-parsing", "warning", "none",
            f"tool calls are not parsed as K3 writes them (the recipe's {TOOL_PARSER_FLAG} {K3_PARSER})",
            [line for line in (log_says.get("tool-call-parse"),
                               f"engine.args {TOOL_PARSER_FLAG}: {engine_spec.args.get(TOOL_PARSER_FLAG)}") if line]))
    cause = next(((runbook, log_says[pattern]) for pattern, runbook in ENGINE_LOG_RUNBOOKS if pattern in log_says), None)
    urls = engine_urls(engine_spec, specs.rank)
    variables = {"UNIT": ENGINE_UNIT, "PORT": str(engine_spec.port or RECIPES[engine_spec.recipe].port),
             "HEALTH_URL": urls["health_url"], "HOSTS": ",".join(specs.cluster or (specs.name,))}
    if state.get("active") == "failed" or state.get("sub") == "auto-restart":
        result.findings.append(not_serving(state, cause or watchdog_cause(host, state), journal, variables))
        return result
    if state.get("active") == "activating":
        result.notes.append(f"{ENGINE_UNIT} is starting ({state.get('sub')})")
        return result
    if state.get("active") != "active":
        result.notes.append(f"{ENGINE_UNIT} is {state.get('active', 'missing')} ({state.get('result')}), stopped on "
                            "purpose: this host is not serving")
        return result
    if specs.rank > 0:  # a multi-node engine's worker serves no HTTP: its head answers for the cluster
        return result
    served = specs.settings.model.model.name if specs.settings.model.model else ""
    timeout = specs.settings.doctor.doctor_generation_timeout_seconds
    health = host.get_fact(EngineState, health_url=urls["health_url"], models_url=urls["models_url"], served_name=served,
                          chat_url=urls["chat_url"] if urls["models_url"] else None, probe_seconds=timeout)
    running = state.get("active_seconds") or 0
    if state.get("restarts"):
        result.notes.append(f"{ENGINE_UNIT} restarted {state['restarts']} times this boot")
    if not health["ready"]:
        restarted = None if cause else watchdog_cause(host, state)
        ready_once = ready_since_start(health, log_says)
        if state.get("restarts", 0) >= LOOP_RESTARTS:  # caught between two exits of a loop
            result.findings.append(not_serving(state, cause or restarted, journal, variables))
        elif cause:
            result.findings.append(Finding(cause[0], "critical", "restart engine",
                                           f"the engine is not ready: its log says {cause[1]}", [cause[1]], variables))
        elif ready_once:  # whatever the time since its start: the grace period is a start's, and it was ready
            result.findings.append(Finding(
                "engine-generation-stuck", "critical", "restart engine",
                f"the engine was ready after its start ({running:.0f} s ago) and no longer answers: it is stuck",
                [f"health: {health['detail']}", ready_once], variables))
        elif restarted and restarted[0] == "engine-slow-start":
            result.findings.append(Finding(restarted[0], "warning", "none", "the engine is loading again after the "
                                           "watchdog gave up on its last start", [restarted[1], health["detail"]],
                                           variables))
        elif restarted:
            result.findings.append(Finding(restarted[0], "critical", "restart engine", "the engine is not ready "
                                           f"since the watchdog restarted it: {restarted[1]}", [restarted[1]], variables))
        elif running > engine_spec.start_timeout_seconds:
            result.findings.append(Finding(
                "engine-slow-start", "warning", "none",
                f"running {running:.0f} s and not ready (start_timeout_seconds {engine_spec.start_timeout_seconds})",
                [health["detail"], *([log_says["cold-start"]] if "cold-start" in log_says else [])], variables))
        else:
            result.notes.append(f"the engine is starting ({running:.0f} s of {engine_spec.start_timeout_seconds} s): "
                                f"{health['detail']}")
        return result
    answer = health.get("generation") or {}
    if answer.get("answered") is False:
        result.findings.append(Finding(
            "engine-generation-stuck", "critical", "restart engine",
            f"/health answers but one token took more than {timeout} s: generation is stuck",
            [f"health: {health['detail']}", f"generation: {answer['detail']}"], variables))
    return result


def ready_since_start(health: dict, log_says: dict[str, str]) -> str | None:
    """How the doctor knows the engine's current run was ready once (None: it does not): the watchdog's record
    of this invocation of the unit, or the engine's own log of the end of its start."""
    if health.get("ready_since_start"):
        return "watchdog: the engine answered its health checks after this start"
    if "engine-ready" in log_says:
        return f"engine log: {log_says['engine-ready']}"
    return None


def watchdog_cause(host, state: dict) -> tuple[str, str] | None:
    """Why the watchdog restarted the engine into this run, if it did: a start that never became healthy is a
    slow start (or a load that never ends), failed health checks an engine that stopped answering."""
    since = max((state.get("entered") or 0) - WATCHDOG_RESTART_LEAD_SECONDS, 1)
    restarts = [line for line in host.get_fact(UnitJournal, unit=WATCHDOG_SERVICE, lines=JOURNAL_LINES, since=since)
                if f": {watchdog.RESTARTING}: " in line]
    if not restarts:
        return None
    line = f"watchdog: {restarts[-1]}"
    return ("engine-slow-start" if watchdog.START_TIMED_OUT in restarts[-1] else "engine-not-running"), line


def not_serving(state: dict, cause: tuple[str, str] | None, journal: list[str], where: dict) -> Finding:
    """The engine crashed or loops: named by what its log says, else engine-not-running."""
    runbook, line = cause or ("engine-not-running", None)
    return Finding(runbook, "critical", "restart engine",
                   f"{ENGINE_UNIT} is {state.get('active')} ({state.get('sub')}), restarted {state.get('restarts', 0)} "
                   "times this boot: it is not serving",
                   [f"{ENGINE_UNIT}: {unit_line(state)}", *([line] if line else []), *journal[-EVIDENCE_LINES:]], where)


def model_cache(host, specs: HostSpecs) -> CheckResult:
    """The checkpoint store: verification, the volume's free space, a fetch that stopped moving."""
    model = specs.settings.model.model
    state = host.get_fact(ModelCheckpoints, cache_path=specs.settings.model.model_cache_path).get(model.name)
    if state is None:
        return CheckResult(notes=[f"no checkpoint of {model.name} on the host yet: the model deploy has not run"])
    findings = []
    where = {"CACHE": specs.settings.model.model_cache_path,
             "HEADROOM_BYTES": str(specs.settings.model.model_cache_headroom_bytes)}
    if state.get("bad_files"):
        findings.append(Finding(
            "checkpoint-corrupt", "critical", "rerun the deploy",
            f"{len(state['bad_files'])} files of {model.name}@{(state.get('active') or '')[:12]} fail verification "
            f"({state.get('verified_at')})", [f"bad file: {path}" for path in state["bad_files"]], where))
    message = state.get("message") or ""
    headroom = specs.settings.model.model_cache_headroom_bytes
    if any(text in message for text in STORE_SPACE_MESSAGES) or state.get("free_bytes", headroom) < headroom:
        findings.append(Finding(
            "model-cache-disk-full", "critical" if state.get("phase") == "failed" else "warning",
            "free disk space",
            f"{state.get('free_bytes', 0) / 1024**3:.2f} GiB free on {specs.settings.model.model_cache_path}, "
            f"model_cache_headroom_gib is {specs.settings.model.model_cache_headroom_gib}",
            [line for line in (message, f"free bytes: {state.get('free_bytes')}") if line], where))
    elif state.get("phase") == "failed" and "verification failed" not in message:
        findings.append(Finding("checkpoint-fetch-stuck", "warning", "rerun the deploy",
                                f"the fetch of {model.name}@{(state.get('target') or '')[:12]} failed: {message[:200]}",
                                [message], where))
    elif state.get("phase") in FETCHING_PHASES and stalled(state, specs.settings.doctor.doctor_fetch_stall_minutes):
        findings.append(Finding(
            "checkpoint-fetch-stuck", "warning", "rerun the deploy",
            f"the fetch of {model.name} has not moved since {state.get('updated_at')} ({state.get('phase')}: "
            f"{message})", [message, f"bytes done: {state.get('bytes_done')} of {state.get('bytes_total')}"], where))
    return CheckResult(findings)


def stalled(state: dict, minutes: int) -> bool:
    """Whether the store's state (refreshed every few seconds while bytes arrive) is older than `minutes`."""
    try:
        updated = datetime.strptime(state["updated_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except (KeyError, ValueError):
        return False
    return time.time() - updated.timestamp() > minutes * 60


def unit_line(state: dict) -> str:
    if not state:
        return "not installed"
    return (f"{state.get('active')} ({state.get('sub')}), result {state.get('result')}, "
            f"{state.get('restarts', 0)} restarts, last exit status {state.get('exit_status')}")


def _nvidia(specs: HostSpecs) -> bool:
    return specs.settings.gpu.gpu_vendor == "nvidia"


def _amd(specs: HostSpecs) -> bool:
    return specs.settings.gpu.gpu_vendor == "amd"


def _gpus(specs: HostSpecs) -> bool:
    return bool(specs.settings.gpu.gpu_vendor)


@dataclass(frozen=True)
class DoctorCheck:
    """One check, declared once: the name findings and the runbooks' `finding:` headers use, the function, the
    hosts it applies to, and whether it reads the GPUs through the driver (skipped while the driver check that
    ran before it has a finding, so a host with a broken driver gets one finding, not ten)."""

    name: str
    run: Callable[[Any, HostSpecs], CheckResult]
    applies: Callable[[HostSpecs], bool]
    needs_driver: bool = False


# Every check, in the order they run: the driver checks first, the checks that need a driver after.
CHECKS = (
    DoctorCheck("maintenance", maintenance, lambda specs: True),
    DoctorCheck("nvidia-driver", nvidia_driver, _nvidia),
    DoctorCheck("amd-driver", amd_driver, _amd),
    DoctorCheck("kernel-xid", kernel_xids, _nvidia),
    DoctorCheck("gpu-count", gpu_count, _gpus, needs_driver=True),
    DoctorCheck("gpu-memory", gpu_memory, _nvidia, needs_driver=True),
    DoctorCheck("gpu-conditions", gpu_conditions, _nvidia, needs_driver=True),
    DoctorCheck("nvlink", nvlink, _nvidia, needs_driver=True),
    DoctorCheck("nvidia-services", nvidia_services, _nvidia, needs_driver=True),
    DoctorCheck("xgmi", xgmi, _amd, needs_driver=True),
    DoctorCheck("rdma-ports", rdma_ports, lambda specs: _gpus(specs) and bool(specs.settings.gpu.board.rdma_ports)),
    DoctorCheck("fabric-check", fabric_check, _gpus),
    DoctorCheck("engine", engine, lambda specs: specs.settings.engine.engine is not None, needs_driver=True),
    DoctorCheck("model-cache", model_cache, lambda specs: specs.settings.model.model is not None),
)


def checks_for(specs: HostSpecs) -> list[DoctorCheck]:
    """The checks that apply to the host, in order."""
    return [check for check in CHECKS if check.applies(specs)]
