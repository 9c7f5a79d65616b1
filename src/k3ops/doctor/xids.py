"""NVIDIA's Xid error codes: what each means and what k3ops does about it."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["application", "hardware", "driver", "nvlink", "memory"]
Severity = Literal["info", "warning", "critical"]
# NVIDIA's resolution buckets, normalised (fleet-ops.md C5): RESTART_APP -> "restart engine" where the host
# must act, or "none" where the faulting process alone dies; IGNORE -> "none"; RESET_GPU -> "reset GPU";
# RESTART_BM -> "reboot"; RESTART_FM -> "restart fabric manager"; CONTACT_SUPPORT and workflows whose
# outcome the code alone does not decide -> "drain and inspect hardware".
Action = Literal["none", "restart engine", "drain, then reset GPU", "reset GPU", "reboot", "restart fabric manager",
                 "drain and inspect hardware"]

CATALOGUE_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
# The catalogue's rows as read (nccl-runbooks.md B1): gpud's generated copy of NVIDIA's spreadsheet.
CATALOGUE = f"{CATALOGUE_URL} (via leptonai/gpud components/accelerator/nvidia/xid/catalog_generated.go)"
GPUD_XID_NOTES = "https://github.com/leptonai/gpud (components/accelerator/nvidia/xid)"
ML_ENGINEERING_DEBUG = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/nvidia/debug.md"
PAGE_RETIREMENT_URL = "https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html"
FALLEN_OFF_BUS_ISSUE = "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/507"


@dataclass(frozen=True)
class XidEntry:
    """One Xid code: its meaning, what it belongs to, how bad it is, what to do, and who says so."""

    code: int
    meaning: str
    kind: Kind
    severity: Severity
    action: Action
    source: str


XID_CATALOGUE = {entry.code: entry for entry in (
    # Faults of the process that ran the work: the driver kills its context, the GPU stays healthy, and the
    # engine's own supervision restarts it; recurring ones are a bug to debug (compute-sanitizer).
    XidEntry(13, "Graphics engine exception (illegal instruction or out-of-range access)",
             "application", "warning", "none", f"{CATALOGUE}; RESTART_APP; {GPUD_XID_NOTES}"),
    XidEntry(31, "GPU memory page fault (illegal memory access by the application)",
             "application", "warning", "none", f"{CATALOGUE}; RESTART_APP; {GPUD_XID_NOTES}"),
    XidEntry(43, "GPU stopped processing the faulting application's channel",
             "application", "info", "none", f"{CATALOGUE}; IGNORE"),
    # Sympathetic: follow the Xid it accompanies. Alone, NVIDIA's debug guide ties it to Fabric Manager
    # stopping unexpectedly (RESTART_FM); that rule needs the other events and so belongs to the doctor.
    XidEntry(45, "Preemptive cleanup after an earlier error (alone: Fabric Manager stopped)",
             "application", "info", "none", f"{CATALOGUE}; WORKFLOW_XID_45, solo RESTART_FM; {GPUD_XID_NOTES}"),
    XidEntry(69, "Graphics engine class error (bad push buffer from the application)",
             "application", "warning", "none", f"{CATALOGUE}; RESTART_APP, CHECK_APP/CUDA"),
    XidEntry(46, "GPU stopped processing (GPU timeout)",
             "driver", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU"),
    # PMU_BREAKPOINT: the Ampere-and-later catalogue lists it "Unused" (older drivers' micro-controller
    # breakpoint/warning; newer ones report a halted micro-controller as Xid 62): seen on such a GPU, an escalation.
    XidEntry(61, "PMU breakpoint: unused by drivers for Ampere and later (older drivers' micro-controller "
                 "breakpoint; newer ones report a halt as Xid 62)",
             "driver", "warning", "drain and inspect hardware", f"{CATALOGUE}; Unused; CONTACT_SUPPORT"),
    XidEntry(62, "Internal micro-controller (PMU) halt (newer drivers)",
             "driver", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU, then CONTACT_SUPPORT"),
    XidEntry(109, "Context switch timeout",
             "driver", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU"),
    XidEntry(119, "GSP RPC timeout (the GPU's system processor stopped answering)",
             "driver", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU, INVESTIGATE_SW; {GPUD_XID_NOTES}"),
    XidEntry(120, "GSP error",
             "driver", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU, INVESTIGATE_SW; {GPUD_XID_NOTES}"),
    # Informational about another Xid: the line itself carries the driver's recovery action, which the
    # doctor should trust before this catalogue (fleet-ops.md C2, C5).
    XidEntry(154, "GPU recovery action changed (the line names the action another Xid needs)",
             "driver", "info", "none", f"{CATALOGUE}; XID_154"),
    XidEntry(48, "Double-bit ECC error (uncorrectable)",
             "memory", "critical", "reset GPU", f"{CATALOGUE}; WORKFLOW_XID_48; {GPUD_XID_NOTES}"),
    # Row remapping takes effect at the next GPU reset; applications keep running until then.
    XidEntry(63, "Row remapping (page retirement) pending: reset the GPU when convenient to activate it",
             "memory", "warning", "drain, then reset GPU", f"{CATALOGUE}; IGNORE; {ML_ENGINEERING_DEBUG}; {PAGE_RETIREMENT_URL}"),
    XidEntry(64, "Row remapping (page retirement) failure",
             "memory", "critical", "reset GPU",
             f"{CATALOGUE}; RESET_GPU, then CONTACT_SUPPORT; {ML_ENGINEERING_DEBUG}"),
    XidEntry(92, "High single-bit ECC error rate (corrected by the driver)",
             "memory", "info", "none", f"{CATALOGUE}; IGNORE"),
    XidEntry(94, "Contained memory error: only the faulting application must restart",
             "memory", "warning", "restart engine", f"{CATALOGUE}; RESTART_APP; {ML_ENGINEERING_DEBUG}"),
    XidEntry(95, "Uncontained memory error: every application on the GPU is affected",
             "memory", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU; {GPUD_XID_NOTES}"),
    XidEntry(140, "ECC unrecovered error",
             "memory", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU"),
    XidEntry(79, "GPU has fallen off the bus",
             "hardware", "critical", "reboot",
             f"{CATALOGUE}; RESTART_BM, then CONTACT_SUPPORT; {FALLEN_OFF_BUS_ISSUE}"),
    XidEntry(121, "C2C (chip-to-chip) link error",
             "hardware", "info", "none", f"{CATALOGUE}; IGNORE, then CONTACT_SUPPORT"),
    XidEntry(143, "GPU initialisation error",
             "hardware", "critical", "reset GPU", f"{CATALOGUE}; RESET_GPU, then CONTACT_SUPPORT"),
    XidEntry(74, "NVLink error between GPUs or NVSwitches",
             "nvlink", "critical", "reboot", f"{CATALOGUE}; WORKFLOW_NVLINK_ERR; {GPUD_XID_NOTES}"),
    # NVLink5 (Blackwell): whether one is fatal (RESET_GPU) or ignorable depends on the line's intrinfo and
    # error status (the catalogue's "XID 144-150 Decode" sheet), not on the code.
    *(XidEntry(code, f"NVLink5 {unit} error (decode the line's intrinfo and error status)",
               "nvlink", "warning", "drain and inspect hardware", f"{CATALOGUE}; WORKFLOW_NVLINK5_ERR")
      for code, unit in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW_CTRL"),
                         (149, "NETIR"), (150, "MSE"))),
)}

# The runbook that follows an Xid: by its kind, or its code's own. The doctor reads a memory Xid's GPU state now
# (its gpu-memory check) before naming gpu-memory-errors; an alert on the event names it at once.
XID_RUNBOOKS = {"nvlink": "nvlink-errors", "hardware": "gpu-xid-error", "driver": "gpu-xid-error",
                "memory": "gpu-memory-errors"}
XID_CODE_RUNBOOKS = {79: "gpu-fallen-off-bus", 119: "gsp-timeout", 120: "gsp-timeout"}


def runbook(entry: XidEntry) -> str | None:
    """The runbook an Xid calls for; None for an application's fault or a note, which call for none."""
    if entry.kind == "application" or entry.severity == "info":
        return None
    return XID_CODE_RUNBOOKS.get(entry.code) or XID_RUNBOOKS[entry.kind]


# What classify() says of a code missing above (with that code): treat it as a hardware fault until someone
# has read NVIDIA's row for it.
UNKNOWN_XID = XidEntry(0, "Xid not in k3ops' catalogue: look it up in NVIDIA's",
                       "hardware", "warning", "drain and inspect hardware", CATALOGUE_URL)


# The preemptive cleanup that follows another Xid (its line may name it: "caused by previous Xid 149").
SYMPATHETIC_XID = 45
# The Xids of uncorrectable memory errors, and the flags the driver prints with a contained or uncontained one
# ("Contained: SM (0x1). RST: No, D-RST: No", kernel-xid/dmesg-iso_xid-48-63-94-... capture): whether the GPU needs
# a reset (RST) or a drain and reset (D-RST). NVIDIA's catalogue: Xid 94 RESTART_APP, Xid 95 RESET_GPU.
ECC_XIDS = (48, 94, 95)
UNCONTAINED_XID = 95
RESET_FLAGS_REGEX = r"\bRST: (?P<reset>Yes|No), D-RST: (?P<drain>Yes|No)\b"


def ecc_reset(events: list[dict]) -> Literal["none", "drain", "reset"]:
    """What a GPU's uncorrectable errors need, by the driver's words in its ECC Xids: "none" when it contained
    them and asked for no reset, "drain" when it recommends a drain and reset, "reset" for an uncontained error,
    one flagged RST: Yes, or no line that says (the error count alone cannot tell)."""
    flags = [found for event in events if (found := re.search(RESET_FLAGS_REGEX, event["message"]))]
    if not flags or any(event["xid"] == UNCONTAINED_XID for event in events) or \
            any(found["reset"] == "Yes" for found in flags):
        return "reset"
    return "drain" if any(found["drain"] == "Yes" for found in flags) else "none"


# The driver's own word on an NVLink 5 Xid (kernel-xid/kmsg_nvlink5-xid-149-145 capture: "149, NETIR Fatal XC0
# ...", "145, RLW_RXPIPE Nonfatal XC0 ..."): the decode of its intrinfo the catalogue's WORKFLOW_NVLINK5_ERR asks for.
NVLINK5_XIDS = range(144, 151)
NVLINK5_FATAL_REGEX = r"\b(?P<word>Fatal|Nonfatal)\b"


def nvlink5_verdict(entry: XidEntry, message: str) -> XidEntry:
    """An NVLink 5 Xid as its line decodes it: Fatal needs the GPU reset (the catalogue's RESET_GPU for a fatal
    decode), Nonfatal needs nothing but watching; a line that says neither stays the catalogue's workflow."""
    found = re.search(NVLINK5_FATAL_REGEX, message) if entry.code in NVLINK5_XIDS else None
    if not found:
        return entry
    if found["word"] == "Fatal":
        return replace(entry, severity="critical", action="reset GPU", source=f"{entry.source}; the line: Fatal")
    return replace(entry, severity="info", action="none", source=f"{entry.source}; the line: Nonfatal")


def recovery(action: str | None, reset_required: bool) -> tuple[Severity, Action]:
    """What the driver's own recovery action for a GPU means (nvidia-smi's "GPU Recovery Action", the state Xid
    154 announces, and its "GPU Reset Status"): NVML's GPU_RESET, NODE_REBOOT, DRAIN_P2P and DRAIN_AND_RESET,
    as printed ("GPU Reset Required", "Node Reboot Required", "Drain and Reset", ...). A drain comes first
    where the driver asks for one; otherwise it asks for the reset or reboot now."""
    words = (action or "").lower()
    if "reboot" in words:
        return "critical", "reboot"
    if "drain" in words or not (reset_required or "reset" in words):
        return "warning", "drain, then reset GPU"
    return "critical", "reset GPU"


def classify(xid: int) -> XidEntry:
    """The catalogue's entry for an Xid code, or ``UNKNOWN_XID`` (with that code) for one it does not know."""
    return XID_CATALOGUE.get(xid) or replace(UNKNOWN_XID, code=xid)
