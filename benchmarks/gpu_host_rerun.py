"""How long a no-change rerun of deploys/gpu_host.py takes on 1, 4 and 8 lab hosts, and how many
commands each host receives over SSH in that rerun.

    .venv/bin/python benchmarks/gpu_host_rerun.py [--sizes 1 4 8] [--profile h200x8]

The rerun should stay nearly flat as hosts are added (pyinfra works on hosts in parallel); the
command count is what one host pays for a rerun that changes nothing. Run as root with no lab up.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from k3ops_lab import state

REPO_ROOT = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
COMMAND_LINE = re.compile(r"^\[(?P<host>[^\]]+)\] >>> ", re.MULTILINE)


def k3ops(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=True, stdout=subprocess.DEVNULL, cwd=REPO_ROOT)


def deploy(verbose: bool = False) -> tuple[float, str]:
    start = time.monotonic()
    result = subprocess.run([PYINFRA, "-y", *(["-vv"] if verbose else []), "inventory/lab/hosts.py", "deploys/gpu_host.py"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(result.stdout[-3000:] + result.stderr[-3000:])
    return elapsed, result.stdout + result.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--profile", default="h200x8")
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    print(f"{'hosts':>5}{'first run s':>13}{'rerun s':>10}{'commands/host':>15}")
    reruns = {}
    for hosts in args.sizes:
        k3ops("lab", "up", "--hosts", str(hosts), *sum((["--profile", args.profile] for _ in range(hosts)), []))
        try:
            first, _ = deploy()
            reruns[hosts], output = deploy(verbose=True)
        finally:
            k3ops("lab", "down")
        per_host = Counter(match["host"] for match in COMMAND_LINE.finditer(output))
        print(f"{hosts:>5}{first:>13.1f}{reruns[hosts]:>10.1f}{max(per_host.values()):>15}", flush=True)
    smallest, largest = min(reruns), max(reruns)
    print(f"rerun time {largest} hosts / {smallest} host = {reruns[largest] / reruns[smallest]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
