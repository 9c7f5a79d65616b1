"""Facts about the health of the NVIDIA GPUs: what nvidia-smi's report says of each (fabric registration, memory,
reset state, PCIe link, clocks), their NVLinks, and DCGM's diagnostics."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

from .util import NvidiaSmiFact

# `nvidia-smi -q`: "GPU 00000000:18:00.0", then its blocks.
Q_GPU_REGEX = r"^GPU (?P<bus_id>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$"
# A `nvidia-smi -q` line under a GPU heading: a block's label, or a label, padding, ": " and its value, four
# spaces deeper per level ("    Remapped Rows", "        Pending                           : No").
Q_LINE_REGEX = r"^(?P<indent> *)(?P<label>\S.*?)(?P<separator>\s+:(?: (?P<value>.*))?)?$"
REMAPPED_ROWS = "Remapped Rows"
ECC_ERRORS = "ECC Errors"
# Each memory's count under Volatile and Aggregate: "DRAM Uncorrectable", and "SRAM Uncorrectable" split
# into "SRAM Uncorrectable Parity" and "SRAM Uncorrectable SEC-DED" by the 565 driver (H100 capture). GPUs
# before Ampere (V100, even with driver 550) count by error kind instead: a "Double Bit" block and its Total.
UNCORRECTABLE = "Uncorrectable"
DOUBLE_BIT_TOTAL = ("Double Bit", "Total")
FLAGS = {"Yes": True, "No": False}
# `nvidia-smi nvlink -s`: "GPU 0: NVIDIA H200 (UUID: GPU-...)", then "\t Link 0: 26.562 GB/s" per link; a
# link that is down shows "<inactive>" in place of its speed.
NVLINK_GPU_REGEX = r"^GPU (?P<index>\d+): "
NVLINK_LINK_REGEX = r"^\s+Link (?P<link>\d+): (?P<state>.*?)\s*$"
NVLINK_SPEED_REGEX = r"^\d+(?:\.\d+)? GB/s$"


def _gpu_fields(output) -> list[tuple[str, dict[tuple[str, ...], str]]]:
    """Each GPU's bus id and its `-q` values, keyed by the labels of their blocks and their own."""
    gpus, blocks = [], []
    for line in output:
        if found := re.match(Q_GPU_REGEX, line.rstrip()):
            gpus.append((found["bus_id"], {}))
            blocks = []
        elif gpus and (found := re.match(Q_LINE_REGEX, line.rstrip())):
            depth = len(found["indent"])
            while blocks and blocks[-1][0] >= depth:
                blocks.pop()
            if found["separator"]:
                gpus[-1][1][(*(label for _, label in blocks), found["label"])] = (found["value"] or "").strip()
            else:
                blocks.append((depth, found["label"]))
    return gpus


def _count(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def _uncorrectable(fields: dict[tuple[str, ...], str], counter: str) -> int | None:
    """A counter's uncorrectable ECC errors, DRAM and SRAM summed (or the Double Bit total); None where it
    gives no number."""
    counts = [int(value) for labels, value in fields.items()
              if labels[:2] == (ECC_ERRORS, counter) and value.isdigit()
              and (len(labels) == 3 and UNCORRECTABLE in labels[2] or labels[2:] == DOUBLE_BIT_TOTAL)]
    return sum(counts) if counts else None


# What the driver says a GPU needs (R550+: "GPU Recovery Action", the state Xid 154 announces; the 565 driver
# also prints a "GPU Reset Status" block), its PCIe link's replays (a link retrying packets: "Replays Since Reset",
# under "PCI"), and the hardware's own clock slowdowns, under "Clocks Event Reasons" (R535+; "Clocks Throttle
# Reasons" before): nvidia-smi-q/h100-sxm-x8_565.57.01 and h200-x1_590.48.01 captures.
RESET_STATUS = "GPU Reset Status"
RECOVERY_ACTION = ("GPU Recovery Action",)
CLOCK_REASON_BLOCKS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
ACTIVE = {"Active": True, "Not Active": False}
NO_ACTION = ("None", "N/A")
# The GPU's registration with the NVLink fabric (fabric manager's, or the NVLink domain's on GB200/GB300).
FABRIC_STATE = ("Fabric", "State")
FABRIC_STATUS = ("Fabric", "Status")


def _clock_reason(fields: dict[tuple[str, ...], str], label: str) -> bool | None:
    return next((ACTIVE[fields[(block, label)]] for block in CLOCK_REASON_BLOCKS
                 if fields.get((block, label)) in ACTIVE), None)


class NvidiaGpuReport(NvidiaSmiFact):
    """
    Returns what nvidia-smi's full report (`-q`) says of each GPU, in its order: its NVLink fabric registration, its
    memory's row remapping and uncorrectable ECC counts, and what the driver says it needs. One query of the driver
    and one round trip for every check that reads them (a failing GPU can make each query hang). ``None`` where the
    driver prints no such line or N/A (no fabric to join, no row remapping before Ampere, ECC off, older drivers):

    .. code:: python

        [
            {
                "gpu": 0,
                "bus_id": "00000000:18:00.0",
                "fabric_state": "Completed",         # "N/A" where the GPU has no fabric to join
                "fabric_status": "Success",
                "remap_pending": False,              # a remapped row waits for a GPU reset
                "remap_failure": False,              # a remap failed: an RMA criterion
                "remapped_uncorrectable": 0,         # rows remapped for uncorrectable errors
                "remapped_correctable": 0,
                "ecc_volatile_uncorrectable": 0,     # since the last GPU reset or driver load, DRAM and SRAM
                "ecc_aggregate_uncorrectable": 0,    # over the GPU's life
                "recovery_action": None,             # "GPU Reset", "Node Reboot", "Drain and Reset", ... as printed
                "reset_required": False,             # GPU Reset Status
                "drain_and_reset_recommended": False,
                "pcie_replays": 7,                   # since the last reset, and the counter's rollovers
                "pcie_replay_rollovers": 0,
                "hw_slowdown": False,                # the board slowed the clocks (HW Slowdown)
                "power_brake": False,                # ... because the system asserted its power brake
            },
        ]
    """

    command = "nvidia-smi -q 2>/dev/null || true"

    @override
    def process(self, output):
        return [
            {
                "gpu": index,
                "bus_id": bus_id,
                "fabric_state": fields.get(FABRIC_STATE),
                "fabric_status": fields.get(FABRIC_STATUS),
                "remap_pending": FLAGS.get(fields.get((REMAPPED_ROWS, "Pending"))),
                "remap_failure": FLAGS.get(fields.get((REMAPPED_ROWS, "Remapping Failure Occurred"))),
                "remapped_uncorrectable": _count(fields.get((REMAPPED_ROWS, "Uncorrectable Error"))),
                "remapped_correctable": _count(fields.get((REMAPPED_ROWS, "Correctable Error"))),
                "ecc_volatile_uncorrectable": _uncorrectable(fields, "Volatile"),
                "ecc_aggregate_uncorrectable": _uncorrectable(fields, "Aggregate"),
                "recovery_action": None if fields.get(RECOVERY_ACTION, "N/A") in NO_ACTION else fields[RECOVERY_ACTION],
                "reset_required": FLAGS.get(fields.get((RESET_STATUS, "Reset Required"))),
                "drain_and_reset_recommended": FLAGS.get(fields.get((RESET_STATUS, "Drain and Reset Recommended"))),
                "pcie_replays": _count(fields.get(("PCI", "Replays Since Reset"))),
                "pcie_replay_rollovers": _count(fields.get(("PCI", "Replay Number Rollovers"))),
                "hw_slowdown": _clock_reason(fields, "HW Slowdown"),
                "power_brake": _clock_reason(fields, "HW Power Brake Slowdown"),
            }
            for index, (bus_id, fields) in enumerate(_gpu_fields(output))
        ]


class NvlinkLinks(FactBase[dict[int, dict]]):
    """
    Returns each GPU's NVLinks, by nvidia-smi's GPU index: how many it has and which are down. A GPU
    without NVLink (PCIe boards) is listed with no link, or not at all:

    .. code:: python

        {3: {"links": 18, "inactive": [0, 1]}}
    """

    command = "nvidia-smi nvlink -s || true"

    @override
    def requires_command(self) -> str:
        return "nvidia-smi"

    default = dict

    @override
    def process(self, output):
        gpus, gpu = {}, None
        for line in output:
            if found := re.match(NVLINK_GPU_REGEX, line):
                gpu = gpus[int(found["index"])] = {"links": 0, "inactive": []}
            elif gpu is not None and (found := re.match(NVLINK_LINK_REGEX, line)):
                gpu["links"] += 1
                if not re.match(NVLINK_SPEED_REGEX, found["state"]):
                    gpu["inactive"].append(int(found["link"]))
        return gpus


# `dcgmi diag`: a two-column table, "| Diagnostic | Result |" rows under category headings ("|-----  Deployment
# ---...|"); a row with an empty name, or one naming a message ("Warning: GPU3"), belongs to the test above it
# (DCGM 4's "GPU0: Pass" lines, its wrapped messages). DCGM 4 opens with a Metadata section (versions, device
# ids), which holds no test.
DIAG_ROW_REGEX = r"^\| (?P<name>.*?)\s*\| (?P<info>.*?)\s*\|$"
DIAG_HEADING_REGEX = r"^[|+]-+\s+(?P<category>\w+)\s+-"
DIAG_MESSAGE_REGEX = r"^(?:Warning|Info|Error):"
DIAG_GPU_REGEX = r"^GPU\d+: (?P<result>\w+)"
DIAG_EXIT_MARKER = "k3ops-dcgmi-exit="


class DcgmDiag(FactBase[dict]):
    """
    Returns ``dcgmi diag -r 1`` (DCGM's quick deployment checks, seconds): its exit status, and each test's
    result with the lines under it:

    .. code:: python

        {"exit_status": 226, "tests": {"Persistence Mode": {"category": "Deployment", "result": "Fail",
                                                            "details": ["GPU0: Fail", "..."]}}}
    """

    requires_command = "dcgmi"
    command = f"dcgmi diag -r 1; echo {DIAG_EXIT_MARKER}$?"

    @override
    def process(self, output):
        tests, category, last, status = {}, None, None, None
        for line in output:
            line = line.rstrip()
            if line.startswith(DIAG_EXIT_MARKER):
                status = int(line.removeprefix(DIAG_EXIT_MARKER))
            elif heading := re.match(DIAG_HEADING_REGEX, line):
                category, last = heading["category"], None
            elif (row := re.match(DIAG_ROW_REGEX, line)) and category not in (None, "Metadata"):
                if row["name"] and not re.match(DIAG_MESSAGE_REGEX, row["name"]):
                    last = tests[row["name"]] = {"category": category, "result": row["info"].split(" ")[0],
                                                 "details": []}
                elif last is not None and row["info"]:
                    if row["name"] or re.match(DIAG_GPU_REGEX, row["info"]) or not last["details"]:
                        last["details"].append(f"{row['name']} {row['info']}".strip())
                    else:  # a message wrapped at the column's width, mid-word
                        last["details"][-1] += row["info"]
        return {"exit_status": status, "tests": tests}


def diag_failures(found: dict) -> list[str]:
    """What fails in a `DcgmDiag`: each failed test with its lines; a non-zero exit with no test read (DCGM could
    not run) is a failure too."""
    failed = []
    for name, test in found["tests"].items():
        if test["result"] == "Fail":
            details = [line for line in test["details"] if (gpu := re.match(DIAG_GPU_REGEX, line)) is None
                       or gpu["result"] != "Pass"]
            failed.append(f"{name}: Fail" + (f" ({'; '.join(details)})" if details else ""))
    if not failed and found["exit_status"] not in (0, None) and not found["tests"]:
        failed.append(f"dcgmi diag exited {found['exit_status']} without a result")
    return failed
