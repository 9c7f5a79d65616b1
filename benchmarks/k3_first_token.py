"""Time from a bare lab to the first served token, split into provisioning, model fetch and engine start.

    .venv/bin/python benchmarks/k3_first_token.py [--sizes 1 4]

For each size: a fresh lab of cpu hosts, then the three deploys that deploys/k3.py composes, run one
after the other so each is timed (GPU host provisioning, model cache and fetch, engine start with
readiness), then `k3ops serve chat` for the first token from every host. The model fetch is split in
two: the transfer (the slowest host's fetch unit, from its own state.json: Hub metadata, download or
peer copy, verification) and the setup around it (the cache volume, packages, the fetcher's venv).
Run as root with no lab up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from k3ops_lab import state

REPO_ROOT = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
DEPLOYS = ("deploys/gpu_host.py", "deploys/model.py", "deploys/serving.py")  # what deploys/k3.py composes


def run(*command: str) -> tuple[float, str]:
    """Seconds the command took, and its output."""
    start = time.monotonic()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(result.stdout[-3000:] + result.stderr[-3000:])
    return time.monotonic() - start, result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    k3ops = [sys.executable, "-m", "k3ops.cli"]
    columns = ("hosts", "provisioning s", "fetch setup s", "transfer s", "engine start s", "first token s", "total s")
    print("".join(f"{name:>16}" for name in columns), flush=True)
    for size in args.sizes:
        run(*k3ops, "lab", "up", "--hosts", str(size), *sum((["--profile", "cpu"] for _ in range(size)), []))
        try:
            (provisioning, _), (fetch, _), (engine, _) = [run(PYINFRA, "-y", "inventory/lab/hosts.py", deploy)
                                                          for deploy in DEPLOYS]
            first_token, _ = run(*k3ops, "serve", "chat", "inventory/lab/hosts.py")
            _, status = run(*k3ops, "model", "status", "--json", "inventory/lab/hosts.py")
        finally:
            run(*k3ops, "lab", "down")
        transfer = max(row["fetch_seconds"] for row in json.loads(status))
        seconds = (provisioning, fetch - transfer, transfer, engine, first_token)
        print(f"{size:>16}" + "".join(f"{value:>16.1f}" for value in seconds) + f"{sum(seconds):>16.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
