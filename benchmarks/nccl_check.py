"""The fabric check's cost and its localization: `k3ops nccl check` on 2, 4 and 8 lab hosts, and the pair
rounds it needs to name one slow host among 8.

    .venv/bin/python benchmarks/nccl_check.py

As root, no lab up: brings up 8 h200x8 hosts, deploys them (deploys/gpu_host.py), then
1. times the whole check (pre-checks, all_reduce per host, all_reduce + alltoall per group of two) on the
   first 2, 4 and 8 hosts (`--limit`), and prints each time against the 2-host time: the groups run in
   parallel, so the ratio should stay near 1, not grow with the host count;
2. makes gpu-06 move half its NICs' bandwidth (ports healthy) and counts the rounds of parallel pairs the
   check needs to name it: with four groups of two (references available), and with the 8 hosts as one
   group (no reference: suspects paired with each other first). Target: a constant number of rounds.
"""

from __future__ import annotations

import json
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
SLOW_HOST = "gpu-06"


def k3ops(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=check, cwd=REPO_ROOT, text=True,
                          capture_output=True)


def fabric_check(inventory: str, hosts: list[str]) -> tuple[float, dict]:
    started = time.monotonic()
    result = k3ops("nccl", "check", inventory, "--json", "--limit", ",".join(hosts), check=False)
    return time.monotonic() - started, json.loads(result.stdout)


def slow(host: str, on: bool) -> None:
    """The lab's nic-slow fault: the host moves half its NICs' bandwidth, its ports healthy."""
    k3ops("lab", "fault", host, *(["nic-slow"] if on else ["--clear"]))


def main() -> int:
    k3ops("lab", "up", "--hosts", str(len(HOSTS)), *[word for _ in HOSTS for word in ("--profile", "h200x8")])
    try:
        with tempfile.TemporaryDirectory() as scratch:
            pairs = lab_inventory(Path(scratch) / "pairs.py", per_host={
                name: {"nccl_group": f"pair-{index // 2}"} for index, name in enumerate(HOSTS)})
            one_group = lab_inventory(Path(scratch) / "one.py", nccl_group="all-eight")
            subprocess.run([PYINFRA, "-y", pairs, "deploys/gpu_host.py"], check=True, cwd=REPO_ROOT,
                           capture_output=True)
            times = {}
            for count in (2, 4, 8):
                times[count], found = fabric_check(pairs, HOSTS[:count])
                assert found["passed"], found
                print(f"check on {count} hosts: {times[count]:.1f} s ({times[count] / times[2]:.2f}x the 2-host time)")
            slow(SLOW_HOST, True)
            try:
                for name, inventory in (("4 groups of 2", pairs), ("1 group of 8", one_group)):
                    seconds, found = fabric_check(inventory, HOSTS)
                    located = next(iter(found["localization"].values()))
                    print(f"slow {SLOW_HOST}, {name}: at fault {located['at_fault']}, {len(located['rounds'])} "
                          f"round(s) of {[len(r) for r in located['rounds']]} parallel pairs, {seconds:.1f} s")
            finally:
                slow(SLOW_HOST, False)
    finally:
        k3ops("lab", "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
