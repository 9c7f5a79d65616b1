"""The doctor's rules on real kernel-log and fabric manager captures nobody here wrote: a sympathetic Xid 45
follows the Xid it names, a burst keeps every process it killed and the driver's rate limit, a contained memory
error needs no reset, NV_WARN_NOTHING_TO_DO is no restart, and HGX Hopper's fabric registration is read."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from k3ops.doctor.diagnose import diagnose
from k3ops.doctor.xids import ecc_reset
from k3ops.facts.gpu_health import NvidiaGpuReport
from k3ops.facts.journal import UnitJournal
from k3ops.facts.kernel_log import KernelXidEvents
from k3ops.facts.nvidia import FabricManager, NvidiaGpus
from k3ops.facts.units import UnitStates

from ..conftest import real_output
from .test_doctor import FactHost, healthy_h200, runbooks_named, specs, unit

CONTAINED = "kernel-xid/dmesg-iso_xid-48-63-94-contained-rst-flags_burst-94-python3.10.txt"
CAUSED_BY = "kernel-xid/xid-45_caused-by-previous-xid-149-145_nvlink5_590.48.01.txt"
PLAIN_45 = "kernel-xid/dmesg-ctime_xid-45-plain-ch_then-hung-task-nvidia-rwsem_5.15.txt"
RATE_LIMITED = "kernel-xid/dmesg-ctime_xid-119-gsp-timeout-burst_rate-limit-1-of-30_xe9680.txt"
OLD_DBE = "kernel-xid/dmesg-T_xid-48-dbe-63-page-retirement_old-format_390.30-era.txt"
NOTHING_TO_DO = "fabricmanager/journal_nvidia-fabricmanager_fail_nv-warn-nothing-to-do_no-nvswitch.txt"


def events(capture: str) -> list[dict]:
    return KernelXidEvents().process(real_output(capture).splitlines())


def gpus_at(*pcis: str) -> list[dict]:
    """The host's eight GPUs as nvidia-smi lists them, the first at these PCI addresses (0000:19:00)."""
    gpus = healthy_h200()[NvidiaGpus]
    return [{**gpu, "bus_id": f"0000{pcis[gpu['index']].upper()}.0"} if gpu["index"] < len(pcis) else gpu
            for gpu in gpus]


def test_a_burst_keeps_every_process_it_killed_and_the_drivers_rate_limit():
    contained = events(CONTAINED)[-1]
    assert (contained["xid"], contained["count"], contained["process"]) == (94, 9, None)  # its first line names none
    assert contained["processes"] == [{"pid": 1248209, "process": "python3.10"}]
    limited = events(RATE_LIMITED)
    assert [(event["count"], event["printed_one_in"]) for event in limited] == [(4, 30), (1, 30)]
    assert [known["process"] for known in limited[0]["processes"]] == ["nvidia-smi", "cache_mgr_main"]
    assert {event["caused_by"] for event in events(CAUSED_BY)} == {149, 145}


def test_the_evidence_names_the_killed_process_and_the_sample_the_driver_printed():
    facts = {**healthy_h200(), KernelXidEvents: events(RATE_LIMITED), NvidiaGpus: gpus_at("0000:9b:00")}
    facts[NvidiaGpuReport] = []
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["gsp-timeout"]
    evidence = diagnosis.findings[0].evidence
    assert any("(4 times)" in line and "processes: nvidia-smi 2024380, cache_mgr_main 1263500" in line
               and "the driver printed 1 of every 30 of these" in line for line in evidence), evidence


def test_a_sympathetic_xid_45_follows_the_xid_it_names():
    facts = {**healthy_h200(), KernelXidEvents: events(CAUSED_BY),
             NvidiaGpus: gpus_at("0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00")}
    diagnosis = diagnose(FactHost(facts), specs("b300x8"))
    assert runbooks_named(diagnosis) == ["nvlink-errors"]
    finding = diagnosis.findings[0]
    assert finding.summary.startswith("Xid 14") and "(named by Xid 45: the GPU's own fault)" in finding.summary
    assert sum("caused by previous Xid" in line for line in finding.evidence) == 7


def test_xid_45_alone_is_the_catalogues_fabric_manager_restart_when_fabric_manager_stopped_around_it():
    """Alone, NVIDIA ties Xid 45 to fabric manager stopping (solo RESTART_FM); fabric manager's unit says whether it
    did. Up since before the Xid, or no fabric manager at all: a process killed with work on the GPU, a note."""
    plain = events(PLAIN_45)
    assert [(event["xid"], event["caused_by"], event["time"]) for event in plain] == [
        (45, None, "2024-10-12T18:35:32")]
    xid_at = datetime(2024, 10, 12, 18, 35, 32, tzinfo=timezone.utc).timestamp()

    def fabric_manager(**state):
        """UnitStates with fabric manager in `state` and every other unit running."""
        return lambda units: {name: {**unit(), **(state if name == "nvidia-fabricmanager.service" else {})}
                              for name in units}

    facts = {**healthy_h200(), KernelXidEvents: plain}
    for state, finding in (({"entered": int(xid_at) - 3600}, False), ({"entered": int(xid_at) + 60}, True),
                           ({"active": "failed", "sub": "failed"}, True)):
        diagnosis = diagnose(FactHost({**facts, UnitStates: fabric_manager(**state)}), specs())  # an HGX H200
        if finding:
            assert runbooks_named(diagnosis) == ["fabric-manager-down"], state
            assert (diagnosis.findings[0].severity, diagnosis.findings[0].action) == ("warning",
                                                                                      "restart fabric manager")
        else:
            assert diagnosis.findings == [] and any("has run since before it" in note for note in diagnosis.notes)
    diagnosis = diagnose(FactHost(facts), specs(fabric_manager="off"))
    assert diagnosis.findings == [] and any("no fabric manager here" in note for note in diagnosis.notes)
    beside = {**facts, KernelXidEvents: [*plain, {**plain[0], "xid": 13, "message": "Graphics Exception"}]}
    diagnosis = diagnose(FactHost({**beside, UnitStates: fabric_manager(active="failed")}), specs())
    assert any("it follows Xid 13 on this GPU" in note for note in diagnosis.notes)
    assert "fabric-manager-down" not in [finding.runbook for finding in diagnosis.findings if finding.check == "kernel-xid"]


def test_a_contained_uncorrectable_error_needs_no_reset_and_one_the_driver_does_not_explain_does():
    assert ecc_reset([event for event in events(CONTAINED) if event["xid"] in (48, 94)]) == "none"
    assert ecc_reset([event for event in events(OLD_DBE) if event["xid"] == 48]) == "reset"
    facts = {**healthy_h200(), KernelXidEvents: events(CONTAINED), NvidiaGpus: gpus_at("0000:19:00"),
             NvidiaGpuReport: [{**healthy_h200()[NvidiaGpuReport][0], "bus_id": "00000000:19:00.0",
                                "remap_pending": True, "ecc_volatile_uncorrectable": 1}]}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["gpu-memory-errors"]
    finding = diagnosis.findings[0]
    assert finding.severity == "warning" and finding.action == "drain, then reset GPU"  # the pending remap's
    assert any("RST: No, D-RST: No" in line for line in finding.evidence)
    facts[NvidiaGpuReport] = [{**facts[NvidiaGpuReport][0], "remap_pending": False}]
    finding = diagnose(FactHost(facts), specs()).findings[0]
    assert (finding.severity, finding.action) == ("warning", "restart engine") and "contained" in finding.summary
    facts[KernelXidEvents] = []  # the log rotated: the count alone cannot say it was contained
    finding = diagnose(FactHost(facts), specs()).findings[0]
    assert (finding.severity, finding.action) == ("critical", "reset GPU")


@pytest.mark.parametrize("drain, expected", [("Yes", "drain"), ("No", "none")])
def test_the_drivers_drain_and_reset_flag_is_followed(drain, expected):
    line = next(event for event in events(CONTAINED) if "RST:" in event["message"])
    assert ecc_reset([{**line, "message": line["message"].replace("D-RST: No", f"D-RST: {drain}")}]) == expected
    assert ecc_reset([{**line, "xid": 95}]) == "reset"


def test_nothing_to_do_from_fabric_manager_is_no_restart():
    facts = {**healthy_h200(), FabricManager: {"installed_version": "580.126.09", "active": False},
             UnitJournal: real_output(NOTHING_TO_DO).splitlines()}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["fabric-manager-down"]
    finding = diagnosis.findings[0]
    assert finding.action == "drain and inspect hardware" and "NV_WARN_NOTHING_TO_DO" in finding.summary


def test_hgx_hopper_gpus_stuck_registering_with_the_fabric_are_found():
    registering = [{**gpu, "fabric_state": "In Progress", "fabric_status": "N/A"}
                   for gpu in healthy_h200()[NvidiaGpuReport]]
    facts = {**healthy_h200(), NvidiaGpuReport: registering}
    diagnosis = diagnose(FactHost(facts), specs())
    assert runbooks_named(diagnosis) == ["fabric-manager-down"]
    assert "fabric In Progress/N/A" in diagnosis.findings[0].summary
    not_reported = [{**gpu, "fabric_state": "N/A"} for gpu in registering]  # no registration to report: no finding
    assert diagnose(FactHost({**facts, NvidiaGpuReport: not_reported}), specs()).findings == []


H100_Q = "nvidia-smi-q/h100-sxm-x8_565.57.01_nvidia-smi-a_gls.txt"
# The report's fields this module's rules read beyond memory and the fabric.
CONDITIONS = ("gpu", "bus_id", "recovery_action", "reset_required", "drain_and_reset_recommended", "pcie_replays",
              "pcie_replay_rollovers", "hw_slowdown", "power_brake")
H200_Q = "nvidia-smi-q/h200-x1_590.48.01_nvidia-smi-q_load.txt"


def conditions(capture: str) -> list[dict]:
    return NvidiaGpuReport().process(real_output(capture).splitlines())


def test_the_fields_nothing_read_are_read_from_real_reports():
    """565 prints GPU Reset Status, 590 only GPU Recovery Action; both the PCIe replays and the clock reasons."""
    h100 = conditions(H100_Q)
    assert len(h100) == 8 and {key: value for key, value in h100[0].items() if key in CONDITIONS} == {
        "gpu": 0, "bus_id": "00000000:18:00.0", "recovery_action": None, "reset_required": False,
        "drain_and_reset_recommended": False, "pcie_replays": 7, "pcie_replay_rollovers": 0, "hw_slowdown": False,
        "power_brake": False}
    [h200] = conditions(H200_Q)
    assert (h200["reset_required"], h200["recovery_action"], h200["pcie_replays"], h200["power_brake"]) == (
        None, None, 0, False)


def test_a_healthy_report_is_quiet_and_replays_are_a_note():
    facts = {**healthy_h200(), NvidiaGpuReport: conditions(H100_Q)}
    diagnosis = diagnose(FactHost(facts), specs())
    assert diagnosis.findings == [] and any("7 PCIe replays since its reset" in note for note in diagnosis.notes)


@pytest.mark.parametrize(("change", "severity", "action"), [
    ({"recovery_action": "GPU Reset Required"}, "critical", "reset GPU"),
    ({"reset_required": True}, "critical", "reset GPU"),
    ({"recovery_action": "Node Reboot Required"}, "critical", "reboot"),
    ({"drain_and_reset_recommended": True}, "warning", "drain, then reset GPU"),
    ({"recovery_action": "Drain and Reset"}, "warning", "drain, then reset GPU"),
])
def test_the_drivers_own_recovery_action_is_followed(change, severity, action):
    report = conditions(H100_Q)
    report[3] = {**report[3], **change}
    diagnosis = diagnose(FactHost({**healthy_h200(), NvidiaGpuReport: report}), specs())
    assert runbooks_named(diagnosis) == ["gpu-xid-error"]
    finding = diagnosis.findings[0]
    assert (finding.severity, finding.action, finding.variables) == (severity, action, {"GPU": "3"})


def test_the_lab_power_brake_shows_where_the_real_report_does_and_names_its_runbook(tmp_path, capsys):
    from k3ops_lab.sim import nvidia_smi

    from ..lab.fake_host import nvidia_host, run

    host, _ = nvidia_host(tmp_path, faults={"power_brake": [3]})
    status, out, _ = run(nvidia_smi, capsys, host, "-q")
    assert status == 0
    braked = NvidiaGpuReport().process(out.splitlines())
    assert [gpu["power_brake"] for gpu in braked] == [index == 3 for index in range(8)]
    assert braked[3]["hw_slowdown"] is True
    # no fabric manager runs on this fake host: its GPUs are registered as on a healthy HGX board
    braked = [{**gpu, "fabric_state": "Completed", "fabric_status": "Success"} for gpu in braked]
    diagnosis = diagnose(FactHost({**healthy_h200(), NvidiaGpuReport: braked}), specs())
    assert runbooks_named(diagnosis) == ["gpu-power-brake"] and diagnosis.findings[0].variables == {"GPU": "3"}


def test_an_nvlink5_xid_is_judged_by_the_drivers_own_fatal_or_nonfatal():
    """The catalogue's WORKFLOW_NVLINK5_ERR decodes the line; the driver prints the verdict in it."""
    lines = events("kernel-xid/kmsg_nvlink5-xid-149-145_gb200-style-lines.txt")
    diagnosis = diagnose(FactHost({**healthy_h200(), KernelXidEvents: lines}), specs("b300x8"))
    assert runbooks_named(diagnosis) == ["nvlink-errors"]
    assert (diagnosis.findings[0].severity, diagnosis.findings[0].action) == ("critical", "reset GPU")
    nonfatal = [event for event in lines if "Nonfatal" in event["message"]]
    diagnosis = diagnose(FactHost({**healthy_h200(), KernelXidEvents: nonfatal}), specs("b300x8"))
    assert diagnosis.findings == [] and any("Xid 145" in note for note in diagnosis.notes)
