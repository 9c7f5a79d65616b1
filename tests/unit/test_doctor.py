"""The doctor's rules on a host whose facts are given: no alarm on a healthy host or for an application's
Xid, one finding per incident, the driver first, and every runbook it names exists and says it detects it.

The facts' parsers are tested on real captures (tests/unit/facts, test_doctor_xids.py,
test_doctor_log_patterns.py); here a host answers each fact with a value, as the hardware we lack would.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from k3ops.doctor import checks, xids
from k3ops.doctor.checks import CHECKS, HostSpecs
from k3ops.doctor.diagnose import diagnose
from k3ops.doctor.findings import EXPLAINED_BY, SEVERITY_RANK, exit_status
from k3ops.doctor.runbooks import RunbookError, index_table, parse, runbooks
from k3ops.facts.amd import AmdgpuModule
from k3ops.facts.apt import AptPolicyVersion
from k3ops.facts.boot import SecureBoot
from k3ops.facts.checkpoint import ModelCheckpoints
from k3ops.facts.engine import EngineState
from k3ops.facts.fabric import InfinibandActiveMtu, InfinibandPorts, XgmiLinks
from k3ops.facts.fabric_check import LastFabricCheck
from k3ops.facts.gpu_health import NvidiaGpuReport, NvlinkLinks
from k3ops.facts.journal import UnitJournal
from k3ops.facts.kernel_log import KernelDriverMismatch, KernelXidEvents
from k3ops.facts.maintenance import MaintenanceMarker
from k3ops.facts.nvidia import (FabricManager, NvidiaDriverState, NvidiaGpus, NvidiaKernelModule,
                                NvidiaUserspaceVersion, NvSwitches)
from k3ops.facts.units import UnitStates
from k3ops.maintenance import iso
from k3ops.onhost.layout import ENGINE_UNIT
from k3ops_lab.inventory import LAB_HEADROOM_GIB

ENGINE = {"recipe": "llama.cpp-gguf", "binary_url": "https://example.com/llama-server.tar.gz",
          "binary_sha256": "a" * 64, "model_file": "tiny-k3.gguf"}
MODEL = {"repo_id": "moonshotai/tiny-k3", "revision": "b" * 40, "name": "tiny-k3"}
GIB = 1024**3


class FactHost:
    """A host that answers each fact with a given value (a callable gets the fact's arguments)."""

    def __init__(self, facts: dict):
        self.facts = facts

    def get_fact(self, fact_class, **arguments):
        value = self.facts[fact_class]
        return value(**arguments) if callable(value) else value


def engine_unit(state: dict):
    """UnitStates with the engine in `state` and every other unit running."""
    return lambda units: {name: state if name == ENGINE_UNIT else unit() for name in units}


def unit(active="active", sub="running", result="success", restarts=0, seconds=600.0) -> dict:
    return {"load": "loaded", "active": active, "sub": sub, "result": result, "restarts": restarts, "exit_status": 0,
            "active_seconds": seconds if active == "active" else None, "changed": None}


def healthy_h200() -> dict:
    gpus = [{"index": index, "bus_id": f"00000000:{0x18 + index:02X}:00.0", "name": "NVIDIA H200"}
            for index in range(8)]
    return {
        MaintenanceMarker: None, NvidiaDriverState: "ready", NvidiaGpus: gpus, KernelXidEvents: [],
        NvidiaGpuReport: [{"gpu": gpu["index"], "bus_id": gpu["bus_id"], "fabric_state": "Completed",
                           "fabric_status": "Success",
                           "remap_pending": False, "remap_failure": False, "ecc_volatile_uncorrectable": 0,
                           "recovery_action": None, "reset_required": False, "drain_and_reset_recommended": False,
                           "pcie_replays": 0, "pcie_replay_rollovers": 0, "hw_slowdown": False, "power_brake": False}
                          for gpu in gpus],
        NvlinkLinks: {index: {"links": 18, "inactive": []} for index in range(8)},
        NvSwitches: ["0000:05:00.0"] * 4, FabricManager: {"installed_version": "580.126.09", "active": True},
        UnitJournal: [], SecureBoot: False,
        UnitStates: lambda units: {name: unit() for name in units},
        InfinibandPorts: [{"device": f"mlx5_{index}", "port": 1, "state": "Active", "physical_state": "LinkUp",
                           "rate_gbps": 400, "link_layer": "InfiniBand"} for index in range(8)],
        InfinibandActiveMtu: {f"mlx5_{index}": 4096 for index in range(8)}, LastFabricCheck: None,
        EngineState: {"unit": "active", "revision": "/srv", "ready": True, "detail": "healthy",
                      "generation": {"answered": True, "seconds": 0.2, "detail": "generated one token"}},
        ModelCheckpoints: {"tiny-k3": {"active": "b" * 40, "phase": "active", "bad_files": [], "free_bytes": 6 * GIB,
                                       "message": "", "updated_at": "2026-12-01T10:00:00Z"}},
    }


def specs(profile: str = "h200x8", **data) -> HostSpecs:
    host_data = {"hardware_profile": profile, "engine": ENGINE, "model": MODEL,
                 "model_cache_headroom_gib": LAB_HEADROOM_GIB, **data}
    return HostSpecs.of("gpu-01", host_data, [("gpu-01", host_data)])


def xid(code: int, message: str = "", pci: str = "0000:1b:00", pid: int | None = None,
        caused_by: int | None = None) -> dict:
    return {"time": "2026-12-01T10:00:00+00:00", "pci": pci, "xid": code, "pid": pid, "process": None,
            "message": message, "count": 1, "processes": [{"pid": pid, "process": None}] if pid else [],
            "caused_by": caused_by, "printed_one_in": None}


def runbooks_named(diagnosis) -> list[str]:
    """The runbooks a diagnosis names; none of its findings is worse than its runbook's header says."""
    for finding in diagnosis.findings:
        assert SEVERITY_RANK[finding.severity] <= SEVERITY_RANK[runbooks()[finding.runbook].severity], finding
    return [finding.runbook for finding in diagnosis.findings]


def test_a_healthy_host_has_no_finding_and_exits_0():
    diagnosis = diagnose(FactHost(healthy_h200()), specs())
    assert (diagnosis.findings, diagnosis.unchecked, diagnosis.status) == ([], [], "healthy")
    assert exit_status([diagnosis]) == 0 and diagnosis.commands > 10


@pytest.mark.parametrize("code", [13, 31, 43])
def test_an_applications_xid_is_a_note_not_an_alarm(code):
    facts = {**healthy_h200(), KernelXidEvents: [xid(code, "pid=4242, name=python3, Ch 00000008", pid=4242)]}
    diagnosis = diagnose(FactHost(facts), specs())
    assert diagnosis.findings == [] and diagnosis.status == "healthy"
    assert any(f"Xid {code}" in note for note in diagnosis.notes)


def test_a_gpu_off_the_bus_is_one_incident_named_by_its_xid():
    facts = {**healthy_h200(), KernelXidEvents: [xid(79, "GPU has fallen off the bus.")],
             NvidiaGpus: healthy_h200()[NvidiaGpus][:3] + healthy_h200()[NvidiaGpus][4:]}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["gpu-fallen-off-bus"]
    finding = diagnosis.findings[0]
    assert (finding.severity, finding.action) == ("critical", "reboot")
    assert any("7 GPUs visible" in line for line in finding.evidence) and finding.variables["GPU_PCI"] == "0000:1b:00"
    assert exit_status([diagnosis]) == 2


def test_a_gsp_xid_names_its_runbook_and_a_memory_xid_defers_to_the_gpus_memory_state():
    facts = {**healthy_h200(), KernelXidEvents: [xid(119, "Timeout waiting for RPC from GSP!"), xid(48, "DBE")]}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["gsp-timeout"] and diagnosis.findings[0].action == "reset GPU"
    assert any("Xid 48" in note and "gpu-memory" in note for note in diagnosis.notes)


def test_a_broken_driver_is_the_one_finding_and_the_gpu_checks_wait_for_it():
    facts = {**healthy_h200(), NvidiaDriverState: "mismatch", NvidiaGpus: [],
             NvidiaKernelModule: {"version": "580.95.05", "flavour": "open"}, NvidiaUserspaceVersion: "580.126.09",
             KernelDriverMismatch: ("580.126.09", "580.95.05")}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["nvml-driver-mismatch"]
    assert "580.95.05" in diagnosis.findings[0].summary
    assert any("API mismatch: the client has the version 580.126.09" in line for line in diagnosis.findings[0].evidence)
    assert {line.split(":")[0] for line in diagnosis.unchecked} == {"gpu-count", "gpu-memory", "gpu-conditions",
                                                                   "nvlink", "nvidia-services", "engine"}


@pytest.mark.parametrize(("secure_boot", "runbook"), [(True, "secure-boot-blocks-driver"),
                                                      (False, "nvidia-driver-not-loaded")])
def test_a_module_not_loaded_is_told_apart_by_secure_boot(secure_boot, runbook):
    facts = {**healthy_h200(), NvidiaDriverState: "no-driver", NvidiaGpus: [], NvidiaKernelModule: None,
             NvidiaUserspaceVersion: "580.126.09", SecureBoot: secure_boot}
    assert runbooks_named(diagnose(FactHost(facts), specs())) == [runbook]


def test_a_pending_row_remap_warns_with_the_gpu_to_reset_after_a_drain():
    memory = healthy_h200()[NvidiaGpuReport]
    memory[5] = {**memory[5], "remap_pending": True}
    diagnosis = diagnose(FactHost({**healthy_h200(), NvidiaGpuReport: memory}), specs())
    assert runbooks_named(diagnosis) == ["gpu-memory-errors"]
    finding = diagnosis.findings[0]
    assert (finding.severity, finding.action, finding.variables) == ("warning", "drain, then reset GPU", {"GPU": "5"})
    assert exit_status([diagnosis]) == 1


def test_an_engine_in_a_restart_loop_is_named_by_what_its_log_says():
    looping = {**healthy_h200(), UnitStates: engine_unit(unit("activating", "auto-restart", "exit-code", 4)),
               UnitJournal: ["ValueError: No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine."]}
    assert runbooks_named(diagnose(FactHost(looping), specs())) == ["engine-oom-at-load"]
    looping[UnitJournal] = ["llama-server: couldn't bind HTTP server socket"]
    diagnosis = diagnose(FactHost(looping), specs())
    assert runbooks_named(diagnosis) == ["engine-not-running"]
    assert diagnosis.findings[0].variables["PORT"] == "8080"


def test_an_engine_caught_between_two_exits_of_a_loop_is_not_serving_and_one_restart_is_a_note():
    starting = {"unit": "active", "revision": None, "ready": False, "detail": "connection refused"}
    looping = {**healthy_h200(), EngineState: starting, UnitStates: engine_unit(unit(restarts=3, seconds=2.0))}
    assert runbooks_named(diagnose(FactHost(looping), specs())) == ["engine-not-running"]
    repaired = {**healthy_h200(), UnitStates: engine_unit(unit(restarts=3, seconds=2.0))}
    diagnosis = diagnose(FactHost(repaired), specs())
    assert diagnosis.findings == [] and any("restarted 3 times" in note for note in diagnosis.notes)


def test_a_start_the_watchdog_gave_up_on_is_a_slow_start():
    journals = {"k3ops-engine.service": [],
                "k3ops-engine-watchdog.service": ["k3ops-engine.service: restarting: not healthy 301 s after start "
                                                  "(limit 300 s)"]}
    facts = {**healthy_h200(), UnitJournal: lambda unit, lines, since=None: journals[unit],
             EngineState: {"unit": "active", "revision": None, "ready": False, "detail": "connection refused"},
             UnitStates: engine_unit(unit(restarts=2, seconds=40.0))}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["engine-slow-start"]
    assert "watchdog: k3ops-engine.service: restarting: not healthy 301 s" in diagnosis.findings[0].evidence[1]


def test_an_engine_stopped_on_purpose_or_still_loading_is_a_note():
    stopped = {**healthy_h200(), UnitStates: engine_unit(unit("inactive", "dead"))}
    diagnosis = diagnose(FactHost(stopped), specs())
    assert diagnosis.findings == [] and any("stopped on purpose" in note for note in diagnosis.notes)
    loading = {**healthy_h200(), EngineState: {"unit": "active", "revision": None, "ready": False,
                                               "detail": "connection refused"},
               UnitStates: engine_unit(unit(seconds=20.0))}
    diagnosis = diagnose(FactHost(loading), specs())
    assert diagnosis.findings == [] and any("starting" in note for note in diagnosis.notes)


def test_health_without_generation_is_a_stuck_engine():
    facts = {**healthy_h200(), EngineState: {"unit": "active", "revision": "/srv", "ready": True, "detail": "healthy",
                                             "generation": {"answered": False, "seconds": 30.0, "detail": "timed out"}}}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["engine-generation-stuck"]
    assert diagnosis.findings[0].action == "restart engine"


@pytest.mark.parametrize("seconds", [42.0, 86400.0])
def test_an_engine_that_was_ready_and_stopped_answering_is_stuck_whatever_the_time_since_its_start(seconds):
    """SIGSTOP after the engine became ready: /health times out. The grace period is a start's; this run was
    ready (the watchdog's record of this invocation, or vLLM's own log of the end of its start)."""
    frozen = {"unit": "active", "revision": "/srv", "ready": False, "detail": ".../health: timed out",
              "ready_since_start": True, "generation": None}
    facts = {**healthy_h200(), EngineState: frozen, UnitStates: engine_unit(unit(seconds=seconds))}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["engine-generation-stuck"]
    finding = diagnosis.findings[0]
    assert (finding.severity, finding.action) == ("critical", "restart engine") and exit_status([diagnosis]) == 2
    assert "watchdog: the engine answered its health checks after this start" in finding.evidence
    said = "(APIServer pid=1804347) INFO:     Application startup complete."
    by_log = {**facts, EngineState: {**frozen, "ready_since_start": False}, UnitJournal: [said]}
    diagnosis = diagnose(FactHost(by_log), specs())
    assert runbooks_named(diagnosis) == ["engine-generation-stuck"] and f"engine log: {said}" in \
        diagnosis.findings[0].evidence
    loading = {**facts, EngineState: {**frozen, "ready_since_start": False}}
    diagnosis = diagnose(FactHost(loading), specs())
    start_timeout = specs().settings.engine.engine.start_timeout_seconds
    assert runbooks_named(diagnosis) == ([] if seconds <= start_timeout else ["engine-slow-start"])


def test_the_model_cache_names_corruption_and_a_full_disk():
    facts = healthy_h200()
    facts[ModelCheckpoints] = {"tiny-k3": {**facts[ModelCheckpoints]["tiny-k3"], "bad_files": ["tiny-k3.gguf"],
                                           "free_bytes": 64 * 1024**2}}
    diagnosis = diagnose(FactHost(facts), specs())
    assert sorted(runbooks_named(diagnosis)) == ["checkpoint-corrupt", "model-cache-disk-full"]
    assert "bad file: tiny-k3.gguf" in diagnosis.findings[0].evidence


def test_a_failed_fabric_check_is_named_on_the_host_at_fault_only():
    record = {"time": "2026-12-01T10:00:00+00:00", "verdict": "fail", "reasons": ["cluster_all_reduce: slow"],
              "cluster": {"name": "drill", "members": ["gpu-01", "gpu-02"], "verdict": "fail"}, "prechecks": [],
              "tests": [{"test": "cluster_all_reduce", "hosts": ["gpu-01", "gpu-02"], "verdict": "fail",
                         "reason": "slow"}]}
    blamed = diagnose(FactHost({**healthy_h200(), LastFabricCheck: {**record, "at_fault": True}}), specs())
    assert runbooks_named(blamed) == ["nccl-check-failed"]
    assert blamed.findings[0].variables == {"HOSTS": "gpu-01,gpu-02"}
    cleared = diagnose(FactHost({**healthy_h200(), LastFabricCheck: {**record, "at_fault": False}}), specs())
    assert cleared.findings == [] and any("another host was at fault" in note for note in cleared.notes)


def test_an_amd_host_names_an_unloaded_driver_and_a_mismatched_one():
    base = {MaintenanceMarker: None, AmdgpuModule: "6.14.14", UnitJournal: [], LastFabricCheck: None, SecureBoot: False,
            AptPolicyVersion: {"installed": "1:6.14.14.30100200-2212569.24.04", "candidate": None},
            XgmiLinks: {"gpus": list(range(8)), "not_xgmi": []},
            **{fact: healthy_h200()[fact] for fact in (UnitStates, EngineState, ModelCheckpoints,
                                                       InfinibandPorts, InfinibandActiveMtu)}}
    from k3ops.facts.amd import RocmGpus

    base[RocmGpus] = [{"card": index} for index in range(8)]
    assert diagnose(FactHost(base), specs("mi355x8")).findings == []
    assert runbooks_named(diagnose(FactHost({**base, AmdgpuModule: "6.12.12"}), specs("mi355x8"))) == [
        "rocm-driver-mismatch"]
    unloaded = diagnose(FactHost({**base, AmdgpuModule: None}), specs("mi355x8"))
    assert runbooks_named(unloaded) == ["amdgpu-not-loaded"] and unloaded.unchecked
    refused = diagnose(FactHost({**base, AmdgpuModule: None, SecureBoot: True}), specs("mi355x8"))
    assert runbooks_named(refused) == ["secure-boot-blocks-driver"]


def marker_at(**fields) -> dict:
    """A rollout's marker (k3ops.maintenance.marker), with `fields` over it."""
    return {"reason": "driver upgrade to 580.126.09", "by": "k3ops upgrade", "state": "upgrading",
            "since": iso(datetime.now(timezone.utc) - timedelta(minutes=10)), "rollout": "5f0c2a91d3e4b6a7",
            "controller": "ops@bastion-1", "group": "gpu-01", **fields}


def in_minutes(minutes: float) -> str:
    return iso(datetime.now(timezone.utc) + timedelta(minutes=minutes))


def under_maintenance(marker: dict) -> dict:
    """A host a rollout is upgrading: its driver half installed, its engine stopped, and `marker`."""
    return {**healthy_h200(), MaintenanceMarker: marker, NvidiaDriverState: "mismatch", NvidiaGpus: [],
            NvidiaKernelModule: None, NvidiaUserspaceVersion: None, KernelDriverMismatch: None,
            UnitStates: engine_unit(unit(active="inactive", sub="dead")),
            EngineState: {"unit": "inactive", "revision": None, "ready": False, "detail": "not running"}}


def test_under_maintenance_until_its_deadline_a_host_reports_so_and_exits_0():
    diagnosis = diagnose(FactHost(under_maintenance(marker_at(deadline=in_minutes(30)))), specs())
    assert diagnosis.status == "maintenance" and diagnosis.findings and exit_status([diagnosis]) == 0
    assert "host-left-in-maintenance" not in runbooks_named(diagnosis)


@pytest.mark.parametrize("marker", [marker_at(deadline=in_minutes(-1)),  # its controller died a minute ago
                                    {"reason": "RMA ticket 4711", "by": "ops: alice",  # a person's, no deadline
                                     "since": iso(datetime.now(timezone.utc) - timedelta(hours=25))},
                                    {"reason": "unreadable marker: ''"},  # an empty file
                                    marker_at(deadline="next tuesday")])
def test_a_marker_past_its_deadline_is_a_warning_with_every_finding_shown(marker):
    facts = {**healthy_h200(), MaintenanceMarker: marker,
             UnitStates: lambda units: {name: unit(active="failed", sub="failed", result="signal")
                                        if name == checks.PERSISTENCED_UNIT else unit() for name in units}}
    diagnosis = diagnose(FactHost(facts), specs())
    assert diagnosis.status == "warning" and diagnosis.maintenance is None and exit_status([diagnosis]) == 1
    assert runbooks_named(diagnosis) == ["host-left-in-maintenance", "persistenced-down"]
    assert "nobody" in diagnosis.findings[0].summary and diagnosis.findings[0].check == "maintenance"


def test_a_host_a_rollout_left_failed_is_critical_and_explains_its_stopped_engine():
    marker = marker_at(state="failed", deadline=None, detail="fabric check failed: mlx5_2 port 1: Down")
    facts = {**healthy_h200(), MaintenanceMarker: marker,
             UnitStates: engine_unit(unit(active="inactive", sub="dead", result="success")),
             EngineState: {"unit": "inactive", "revision": None, "ready": False, "detail": "not running"}}
    diagnosis = diagnose(FactHost(facts), specs())
    assert diagnosis.status == "critical" and exit_status([diagnosis]) == 2
    assert runbooks_named(diagnosis) == ["host-left-in-maintenance"]
    assert "failed: fabric check failed: mlx5_2 port 1: Down" in diagnosis.findings[0].summary
    assert "rollout 5f0c2a91d3e4b6a7 from ops@bastion-1" in diagnosis.findings[0].summary
    assert diagnosis.findings[0].variables == {"MARKER_STATE": "failed"}


# The runbooks: every one parses, its header's checks exist, and every runbook the doctor names is one.
def referenced_runbooks() -> set[str]:
    source = Path(checks.__file__).read_text()
    return ({*re.findall(r'Finding\(\s*"([a-z0-9-]+)"', source), *xids.XID_RUNBOOKS.values(),
             *xids.XID_CODE_RUNBOOKS.values(), *(runbook for _, runbook in checks.ENGINE_LOG_RUNBOOKS),
             *EXPLAINED_BY.values(), "engine-not-running"})


def test_every_runbook_the_doctor_names_exists_and_lists_the_check_that_names_it():
    books = runbooks()
    assert len(books) >= 18
    assert referenced_runbooks() <= set(books)
    for book in books.values():
        assert set(book.checks) <= {check.name for check in CHECKS}, book.id
        assert SEVERITY_RANK[book.severity] >= 1


def test_a_runbook_header_that_is_wrong_is_refused_by_name(tmp_path):
    good = next(iter(runbooks().values())).path.read_text()
    broken = tmp_path / "broken-runbook.md"
    broken.write_text(good.replace("severity:", "sev:", 1))
    with pytest.raises(RunbookError, match="broken-runbook.md: .*id .* must be the file's name|lacks severity"):
        parse(broken)


def test_the_runbooks_index_is_made_from_their_headers():
    assert index_table() in (Path(runbooks()["checkpoint-corrupt"].path).parent / "README.md").read_text()


def test_a_check_whose_tool_answers_oddly_is_unchecked_and_the_rest_still_run():
    """nvidia-smi's report hung: each check that reads it is unchecked, after one wait, not one wait each."""
    asked = []

    def hung(**_):
        asked.append("nvidia-smi -q")
        raise TimeoutError("nvidia-smi -q did not answer within 90 s")

    diagnosis = diagnose(FactHost({**healthy_h200(), NvidiaGpuReport: hung}), specs())
    assert diagnosis.findings == [] and diagnosis.status == "warning"
    assert diagnosis.unchecked == [f"{check}: TimeoutError: nvidia-smi -q did not answer within 90 s"
                                   for check in ("gpu-memory", "gpu-conditions", "nvidia-services")]
    assert asked == ["nvidia-smi -q"]


def test_one_finding_per_runbook_keeps_the_gpu_to_replace_over_the_one_to_reset():
    memory = healthy_h200()[NvidiaGpuReport]
    memory[0] = {**memory[0], "ecc_volatile_uncorrectable": 2}
    memory[5] = {**memory[5], "remap_failure": True}
    (finding,) = diagnose(FactHost({**healthy_h200(), NvidiaGpuReport: memory}), specs()).findings
    assert (finding.action, finding.variables["GPU"]) == ("drain and inspect hardware", "5")
    assert len(finding.evidence) == 2


def test_a_multi_node_engines_worker_is_not_asked_for_health_it_does_not_serve():
    engine = {**ENGINE, "recipe": "vllm-h200x8-2node", "cluster": "h200-a", "image_digest": "sha256:" + "5e" * 32}
    engine.pop("binary_url"), engine.pop("binary_sha256"), engine.pop("model_file")
    head, worker = ({"hardware_profile": "h200x8", "engine": engine, "model": MODEL,
                     "model_cache_headroom_gib": LAB_HEADROOM_GIB} for _ in range(2))
    fleet = [("gpu-01", head), ("gpu-02", worker)]
    facts = {**healthy_h200(), EngineState: {"unit": "active", "revision": None, "ready": False, "detail": "refused"},
             UnitStates: engine_unit(unit(seconds=10.0**6))}
    diagnosis = diagnose(FactHost(facts), HostSpecs.of("gpu-02", worker, fleet))
    assert diagnosis.findings == [] and HostSpecs.of("gpu-02", worker, fleet).cluster == ("gpu-01", "gpu-02")
    assert runbooks_named(diagnose(FactHost(facts), HostSpecs.of("gpu-01", head, fleet))) == ["engine-slow-start"]
