"""nvidia-bug-report.sh for the lab's simulated driver: the log an RMA case asks for, of this host.

The real script gathers the host's logs, the driver's /proc files and nvidia-smi's report into one gzipped
file: `--output-file FILE` writes FILE.gz, the default is nvidia-bug-report.log.gz in the working directory,
and `--safe-mode` leaves out what can hang on a GPU that stopped answering. The lab's gathers the same kinds
of sections by running the host's own commands, each within a time limit (so safe mode changes nothing here),
and a report taken before a reboot keeps that boot's kernel log, its Xids included.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_OUTPUT = "nvidia-bug-report.log"
FLAGS = ("--safe-mode", "--extra-system-data")
USAGE = "usage: nvidia-bug-report.sh [--output-file FILE] [--safe-mode] [--extra-system-data]\n"
SECTION_SECONDS = 30
# What the report holds, in order: (title, command). The kernel log is the journal's, this boot's.
SECTIONS = (
    ("uname -a", ("uname", "-a")),
    ("/proc/cmdline", ("cat", "/proc/cmdline")),
    ("/proc/driver/nvidia/version", ("cat", "/proc/driver/nvidia/version")),
    ("/proc/driver/nvidia/params", ("cat", "/proc/driver/nvidia/params")),
    ("lsmod", ("lsmod",)),
    ("lspci -nn -d 10de:", ("lspci", "-nn", "-d", "10de:")),
    ("journalctl -k -b", ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")),
    ("nvidia-smi -q", ("nvidia-smi", "-q")),
)


def section(title: str, command: tuple[str, ...]) -> str:
    """One command's output under its title, or why there is none (a missing tool, a hung one)."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=SECTION_SECONDS)
        body = result.stdout + result.stderr
    except FileNotFoundError:
        body = f"{command[0]}: not found\n"
    except subprocess.TimeoutExpired:
        body = f"{title}: no answer within {SECTION_SECONDS} s\n"
    return f"____________________________________________\n\n*** {title}\n\n{body}\n"


def main(argv: list[str]) -> int:
    output, arguments = DEFAULT_OUTPUT, list(argv)
    while arguments:
        word = arguments.pop(0)
        if word == "--output-file" and arguments:
            output = arguments.pop(0)
        elif word in ("-h", "--help"):
            sys.stdout.write(USAGE)
            return 0
        elif word not in FLAGS:
            sys.stderr.write(f"nvidia-bug-report.sh: unrecognized option {word!r}\n{USAGE}")
            return 1
    path = Path(f"{output}.gz")
    print(f"nvidia-bug-report.sh will now collect information about your system and create the file '{path}'.")
    with gzip.open(path, "wt") as report:
        report.write(f"Start of NVIDIA bug report log file (k3ops lab), {time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n")
        for title, command in SECTIONS:
            report.write(section(title, command))
    print("Running nvidia-bug-report.sh... complete.")
    return 0
