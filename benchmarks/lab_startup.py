"""How long `k3ops lab up` takes, cold (no cached base image or repositories) and warm, for 1, 4 and 8 hosts;
and a VM host beside a container host.

    .venv/bin/python benchmarks/lab_startup.py [--sizes 1 4 8] [--no-cold] [--backends]

Prints one row per run and the ratio of the warm 4-host time to the 2-minute target. With --backends: the
warm boot of one host of each backend, then deploys/gpu_host.py's first run and its no-change rerun on a
container host and a VM host of one lab (cpu profile), and each VM/container ratio. Run as root on an
otherwise idle machine; it brings labs up and down and must not find one running.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from k3ops_lab import state

WARM_FOUR_HOST_TARGET_SECONDS = 120.0


def k3ops(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=True, stdout=subprocess.DEVNULL)


def timed(*args: str) -> float:
    start = time.monotonic()
    k3ops(*args)
    return time.monotonic() - start


def timed_up(hosts: int) -> float:
    elapsed = timed("lab", "up", "--hosts", str(hosts))
    k3ops("lab", "down")
    return elapsed


def timed_deploy(host: str) -> float:
    start = time.monotonic()
    subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "--limit", host, "inventory/lab/hosts.py",
                    "deploys/gpu_host.py"], check=True, stdout=subprocess.DEVNULL, cwd=Path(__file__).parents[1])
    return time.monotonic() - start


def compare_backends() -> None:
    """A VM host beside a container host: warm boots, then the GPU host deploy and its rerun on each."""
    boots = {}
    for backend in ("container", "vm"):
        k3ops("lab", "up", "--hosts", "1", "--profile", "cpu", "--backend", backend)  # builds what is not cached
        k3ops("lab", "down")
        boots[backend] = timed("lab", "up", "--hosts", "1", "--profile", "cpu", "--backend", backend)
        k3ops("lab", "down")
    k3ops("lab", "up", "--hosts", "2", "--profile", "cpu", "--profile", "cpu", "--backend", "container",
          "--backend", "vm")
    try:
        rows = {"boot (lab up, warm)": boots}
        rows["gpu_host.py first run"] = {"container": timed_deploy("gpu-01"), "vm": timed_deploy("gpu-02")}
        rows["gpu_host.py rerun (no change)"] = {"container": timed_deploy("gpu-01"), "vm": timed_deploy("gpu-02")}
    finally:
        k3ops("lab", "down")
    print(f"{'':<32}{'container s':>12}{'vm s':>10}{'vm/container':>14}")
    for what, seconds in rows.items():
        print(f"{what:<32}{seconds['container']:>12.1f}{seconds['vm']:>10.1f}{seconds['vm'] / seconds['container']:>14.2f}")


def forget_cached_images() -> None:
    """Drop what `lab up` builds once (base image, vendor repositories), keeping the apt download cache."""
    for cached in ("images", "vendor-repo"):
        shutil.rmtree(state.CACHE_DIR / cached, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-cold", action="store_true", help="measure warm starts only")
    parser.add_argument("--backends", action="store_true", help="compare a VM host with a container host instead")
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    if args.backends:
        compare_backends()
        return 0
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
