"""`k3ops doctor`'s cost: wall time and commands per host on 1, 4 and 8 lab hosts.

    .venv/bin/python benchmarks/doctor.py

As root, no lab up: brings up 8 h200x8 hosts, deploys the whole stack on them (deploys/k3.py: GPU host,
model, llama-server), then times `k3ops doctor --json` on the first 1, 4 and 8 hosts (`--limit`), a few
runs each (the median), and prints each time against the 1-host time with the commands each host
answered. Every host is diagnosed at once over its own SSH session, so the target is 8 hosts within
1.5x of one. The lab's hosts share this machine's cores with the controller (their simulated vendor tools
and llama-server's generation are Python and CPU), so it also prints the CPU the machine spent during the
run (/proc/stat) over its cores: the time no amount of parallelism on the controller can go below; and the
doctor's own CPU (the k3ops process: SSH sessions, parsing, rules), which is what a fleet of real hosts, each
answering on its own CPUs, would leave on the controller.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
from tests.lab.conftest import lab_inventory  # noqa: E402  (the lab tests' own variant-inventory helper)

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
HOSTS = [f"gpu-{index:02d}" for index in range(1, 9)]
RUNS = 3
TARGET_RATIO = 1.5


def k3ops(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=check, cwd=REPO_ROOT, text=True,
                          capture_output=True)


def busy_cpu_seconds() -> float:
    """The CPU time this machine's cores have spent busy since boot (all but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def doctor(inventory: str, hosts: list[str]) -> tuple[float, float, float, dict]:
    """Wall seconds, the machine's busy CPU seconds, the doctor process's own CPU seconds, and its JSON."""
    started, busy, own = time.monotonic(), busy_cpu_seconds(), children_cpu_seconds()
    result = k3ops("doctor", inventory, "--json", "--limit", ",".join(hosts), check=False)
    return (time.monotonic() - started, busy_cpu_seconds() - busy, children_cpu_seconds() - own,
            json.loads(result.stdout))


def main() -> int:
    k3ops("lab", "up", "--hosts", str(len(HOSTS)), *[word for _ in HOSTS for word in ("--profile", "h200x8")])
    try:
        with tempfile.TemporaryDirectory() as scratch:
            inventory = lab_inventory(Path(scratch) / "fleet.py")
            subprocess.run([PYINFRA, "-y", inventory, "deploys/k3.py"], check=True, cwd=REPO_ROOT,
                           capture_output=True)
            timings = {}
            for count in (1, 4, 8):
                runs = [doctor(inventory, HOSTS[:count]) for _ in range(RUNS)]
                found = runs[-1][3]
                statuses = {host["host"]: host["status"] for host in found["hosts"]}
                commands = sorted({host["commands"] for host in found["hosts"]})
                timings[count] = statistics.median(seconds for seconds, _, _, _ in runs)
                floor = statistics.median(busy for _, busy, _, _ in runs) / os.cpu_count()
                own = statistics.median(cpu for _, _, cpu, _ in runs)
                print(f"{count} hosts: {timings[count]:.2f} s (median of {RUNS}), {timings[count] / timings[1]:.2f}x "
                      f"the 1-host time; CPU floor {floor:.2f} s ({os.cpu_count()} cores), the doctor's own CPU "
                      f"{own:.2f} s; commands per host {commands}; statuses {sorted(set(statuses.values()))}")
            ratio = timings[8] / timings[1]
            print(f"8 hosts / 1 host: {ratio:.2f}x (target {TARGET_RATIO}x): "
                  f"{'within' if ratio <= TARGET_RATIO else 'OVER'} target")
    finally:
        k3ops("lab", "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
