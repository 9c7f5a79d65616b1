"""How long `k3ops lab up` takes, cold (no cached base image or repositories) and warm, for 1, 4 and 8 hosts.

    .venv/bin/python benchmarks/lab_startup.py [--sizes 1 4 8] [--no-cold]

Prints one row per run and the ratio of the warm 4-host time to the 2-minute target. Run as root on
an otherwise idle machine; it brings labs up and down and must not find one running.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time

from k3ops.lab import state

WARM_FOUR_HOST_TARGET_SECONDS = 120.0


def k3ops(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=True, stdout=subprocess.DEVNULL)


def timed_up(hosts: int) -> float:
    start = time.monotonic()
    k3ops("lab", "up", "--hosts", str(hosts))
    elapsed = time.monotonic() - start
    k3ops("lab", "down")
    return elapsed


def forget_cached_images() -> None:
    """Drop what `lab up` builds once (base image, vendor repositories), keeping the apt download cache."""
    for cached in ("images", "vendor-repo"):
        shutil.rmtree(state.CACHE_DIR / cached, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-cold", action="store_true", help="measure warm starts only")
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    results: dict[tuple[str, int], float] = {}
    print(f"{'start':<6}{'hosts':>6}{'seconds':>10}")
    for hosts in args.sizes:
        for kind in (("warm",) if args.no_cold else ("cold", "warm")):
            if kind == "cold":
                forget_cached_images()
            results[kind, hosts] = timed_up(hosts)
            print(f"{kind:<6}{hosts:>6}{results[kind, hosts]:>10.1f}", flush=True)
    if ("warm", 4) in results:
        print(f"warm 4-host start / {WARM_FOUR_HOST_TARGET_SECONDS:.0f}s target = "
              f"{results['warm', 4] / WARM_FOUR_HOST_TARGET_SECONDS:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
