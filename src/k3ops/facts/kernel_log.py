"""Facts read from the kernel log: the NVIDIA driver's Xid error reports and its version complaints."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pyinfra.api import FactBase
from typing_extensions import override

# `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.` Driver 510 printed a
# pid without a name; recent drivers print pid='<unknown>', name=<unknown> where no process is known, and
# neither for Xid 79 or NVLink5 Xids. The "PCI:" prefix is optional as in nccl-runbooks.md B1's regex.
XID_LINE_REGEX = (
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\): (?P<xid>\d+), "
    r"(?:pid=(?P<pid>\d+|'?<unknown>'?), )?(?:name=(?P<process>[^,]*), )?(?P<message>.*)$"
)
UNKNOWN_PROCESS = "<unknown>"
# A sympathetic Xid 45 names the Xid it follows (kernel-xid/xid-45_caused-by-previous-xid-149-145 capture, driver
# 590): "Ch 00000001 caused by previous Xid 149".
CAUSED_BY_REGEX = r"\bcaused by previous Xid (?P<xid>\d+)\b"
# The driver stops printing most of a GPU's GSP RPC errors (kernel-xid/dmesg-ctime_xid-119-... and
# dmesg_xid-119-gsp-rpc-history-... captures): "NVRM: Rate limiting GSP RPC error prints for GPU at
# PCI:0000:9b:00 (printing 1 of every 30).  The GPU likely needs to be reset." The Xids after it are samples.
RATE_LIMIT_REGEX = (r"NVRM: Rate limiting GSP RPC error prints for GPU at PCI:(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:"
                    r"[0-9A-Fa-f]{2}) \(printing 1 of every (?P<every>\d+)\)")
# The driver's own fallen-off-the-bus report, three lines with no Xid (570 open module, NVSentinel issue 155;
# nccl-runbooks.md B4): "NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: 10de:26b5) installed in this
# system has" / "NVRM: fallen off the bus and is not responding to commands." It is reported as Xid 79.
FALLEN_OFF_START_REGEX = r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.[0-7]\b"
FALLEN_OFF_WORDS = "fallen off the bus"
FALLEN_OFF_LINES = 3
FALLEN_OFF_XID = 79
NVRM_TEXT_REGEX = r"NVRM: (?P<text>.*)$"
# NVIDIA Fleet Intelligence's Xid burst: repeats of one Xid on one GPU until 3 minutes of silence
# (nccl-runbooks.md B1, https://docs.nvidia.com/fleet-intel/user-guide/xid-bursts.md).
BURST_SILENCE = timedelta(minutes=3)
# The userspace library and the loaded module differ (driver-mismatch/nvrm-api-mismatch_syslog_470.txt):
# "NVRM: API mismatch: the client has the version 470.74, but" / "NVRM: this kernel module has the version
# 470.63.01. Please".
API_MISMATCH_CLIENT_REGEX = r"NVRM: API mismatch: the client has the version (?P<version>\d+(?:\.\d+)+), but"
API_MISMATCH_MODULE_REGEX = r"NVRM: this kernel module has the version (?P<version>\d+(?:\.\d+)+)\."
# The time before the Xid: `journalctl -o short-iso` (2025-01-21T02:21:33+0000) and
# `dmesg --time-format iso` (2025-01-21T02:21:33,498559+00:00, after a `kern  :warn  : ` facility with --decode).
ISO_TIME_REGEX = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
# `dmesg --ctime` (`[Fri Aug 30 11:43:09 2024]`): local time without a zone.
CTIME_REGEX = r"\[(?P<ctime>\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]"
CTIME_FORMAT = "%a %b %d %H:%M:%S %Y"


def _event_time(prefix: str) -> datetime | None:
    """The time of a log line's prefix; None for seconds since boot (`[ 1843.308]`) or yearless syslog times."""
    if iso := re.search(ISO_TIME_REGEX, prefix):
        return datetime.fromisoformat(iso.group(0))
    if ctime := re.search(CTIME_REGEX, prefix):
        return datetime.strptime(ctime["ctime"], CTIME_FORMAT)
    return None


def kernel_log_command(since_seconds: int) -> str:
    """The kernel log of the current boot's last ``since_seconds``."""
    if isinstance(since_seconds, bool) or not isinstance(since_seconds, int) or since_seconds <= 0:
        raise ValueError(f"since_seconds must be a positive number of seconds, not {since_seconds!r}")
    # The journal keeps the kernel log past the ring buffer's wrap-around; where journalctl is
    # missing, not allowed or holds no kernel lines (containers), dmesg in UTC, whose util-linux 2.38
    # (Debian 12) has no --since, so awk keeps the window. Both read the current boot only.
    return (
        "if journalctl -k -q -n 1 --no-pager 2>/dev/null | grep -q .; then"
        f" journalctl -k -q -o short-iso --no-pager --since=-{since_seconds}s;"
        " else TZ=UTC dmesg --time-format iso 2>/dev/null"
        f" | awk -v since=\"$(date -u -d '-{since_seconds} seconds' +%Y-%m-%dT%H:%M:%S)\" '$1 >= since';"
        " fi || true"
    )


def _fallen_off_bus(lines: list[str], start: int) -> str | None:
    """The driver's fallen-off-the-bus message that begins at ``lines[start]``, its lines joined; None if
    the GPU line begins another message (an unsupported GPU's, for one)."""
    words = []
    for line in lines[start:start + FALLEN_OFF_LINES]:
        text = re.search(NVRM_TEXT_REGEX, line)
        if not text:
            return None
        words.append(text["text"].strip())
        if FALLEN_OFF_WORDS in text["text"]:
            return " ".join(words)
    return None


def _bursts(events: list[tuple[datetime | None, dict]]) -> list[dict]:
    """The events with each burst of one (pci, xid) kept as its first event, with a count, every process its
    lines name (the first line of a contained error names none; the next name the process it killed) and the
    driver's rate limit if any line of it had one; events without a time are never merged, since the gap to the
    next is unknown."""
    bursts, open_bursts = [], {}
    for time, event in events:
        key = (event["pci"], event["xid"])
        burst = open_bursts.get(key)
        if time is not None and burst is not None and time - burst[0] <= BURST_SILENCE:
            first = burst[1]
            first["count"] += 1
            first["processes"] += [process for process in event["processes"] if process not in first["processes"]]
            first["printed_one_in"] = first["printed_one_in"] or event["printed_one_in"]
            open_bursts[key] = (time, first)
            continue
        event["count"] = 1
        bursts.append(event)
        if time is not None:
            open_bursts[key] = (time, event)
    return bursts


def _event(time: datetime | None, pci: str, xid: int, message: str, pid: int | None = None,
           process: str | None = None, caused_by: int | None = None, printed_one_in: int | None = None) -> dict:
    return {"time": time.isoformat() if time else None, "pci": pci, "xid": xid, "pid": pid, "process": process,
            "message": message, "processes": [{"pid": pid, "process": process}] if pid or process else [],
            "caused_by": caused_by, "printed_one_in": printed_one_in}


class KernelXidEvents(FactBase[list[dict]]):
    """
    Returns the NVIDIA Xid errors the kernel logged in the last ``since_seconds``, oldest first, a burst
    of one Xid on one GPU (repeats no more than 3 minutes apart) as its first line with a count. A GPU the
    driver says fell off the bus without an Xid line is reported as Xid 79 with the driver's words:

    .. code:: python

        [
            {
                "time": "2025-01-21T02:21:33.502278+00:00",  # None where the log gives no wall-clock time
                "pci": "0000:38:00",
                "xid": 43,
                "pid": 2815167,           # None when the driver does not know or does not say
                "process": "pt_main_thread",
                "message": "Ch 00000008",
                "count": 1,               # the lines of its burst
                "processes": [{"pid": 2815167, "process": "pt_main_thread"}],  # every one its lines name
                "caused_by": None,        # the Xid a sympathetic Xid 45 says it follows
                "printed_one_in": None,   # 30: the driver printed 1 of every 30 of these (its rate limit)
            },
        ]
    """

    @override
    def command(self, since_seconds: int):
        return kernel_log_command(since_seconds)

    default = list

    @override
    def process(self, output):
        lines = [line.rstrip() for line in output]
        events, rate_limits = [], {}
        for number, line in enumerate(lines):
            if xid := re.search(XID_LINE_REGEX, line):
                time = _event_time(line[:xid.start()])
                pid = int(xid["pid"]) if xid["pid"] and xid["pid"].isdigit() else None
                process = None if xid["process"] == UNKNOWN_PROCESS else xid["process"]
                caused_by = re.search(CAUSED_BY_REGEX, xid["message"])
                events.append((time, _event(time, xid["pci"], int(xid["xid"]), xid["message"], pid, process,
                                            int(caused_by["xid"]) if caused_by else None,
                                            rate_limits.get(xid["pci"].lower()))))
            elif (gpu := re.search(FALLEN_OFF_START_REGEX, line)) and (message := _fallen_off_bus(lines, number)):
                time = _event_time(line[:gpu.start()])
                events.append((time, _event(time, gpu["pci"], FALLEN_OFF_XID, message)))
            elif limit := re.search(RATE_LIMIT_REGEX, line):
                rate_limits[limit["pci"].lower()] = int(limit["every"])
                for _, event in reversed(events):  # the burst it cuts short is the GPU's last one
                    if event["pci"].lower() == limit["pci"].lower():
                        event["printed_one_in"] = int(limit["every"])
                        break
        return _bursts(events)


class KernelDriverMismatch(FactBase[tuple[str, str] | None]):
    """
    Returns the versions the driver's last API-mismatch complaint in the last ``since_seconds`` names,
    the userspace client's and the loaded kernel module's, or ``None`` when it made none:

    .. code:: python

        ("470.74", "470.63.01")
    """

    @override
    def command(self, since_seconds: int):
        return kernel_log_command(since_seconds)

    @override
    def process(self, output):
        mismatch = client = None
        for line in output:
            if found := re.search(API_MISMATCH_CLIENT_REGEX, line):
                client = found["version"]
            elif client and (module := re.search(API_MISMATCH_MODULE_REGEX, line)):
                mismatch = (client, module["version"])
                client = None
        return mismatch
