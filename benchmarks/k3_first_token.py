"""Time from a bare lab to the first served token, split into provisioning, model fetch and engine start.

    .venv/bin/python benchmarks/k3_first_token.py [--sizes 1 4]

For each size: a fresh lab of cpu hosts, then the three deploys that deploys/k3.py composes, run one
after the other so each is timed (GPU host provisioning, model cache and fetch, engine start with
readiness), then `k3ops serve chat` for the first token from every host. Run as root with no lab up.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from k3ops.lab import state

REPO_ROOT = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
PHASES = (("provisioning", "deploys/gpu_host.py"), ("model fetch", "deploys/model.py"),
          ("engine start", "deploys/serving.py"))


def run(*command: str) -> float:
    start = time.monotonic()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(result.stdout[-3000:] + result.stderr[-3000:])
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    k3ops = [sys.executable, "-m", "k3ops.cli"]
    print(f"{'hosts':>5}{'provisioning s':>16}{'model fetch s':>15}{'engine start s':>16}{'first token s':>15}"
          f"{'total s':>9}", flush=True)
    for size in args.sizes:
        run(*k3ops, "lab", "up", "--hosts", str(size), *sum((["--profile", "cpu"] for _ in range(size)), []))
        try:
            seconds = [run(PYINFRA, "-y", "inventory/lab.py", deploy) for _, deploy in PHASES]
            seconds.append(run(*k3ops, "serve", "chat", "inventory/lab.py"))
        finally:
            run(*k3ops, "lab", "down")
        print(f"{size:>5}" + "".join(f"{value:>{width}.1f}" for value, width in zip(seconds, (16, 15, 16, 15)))
              + f"{sum(seconds):>9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
