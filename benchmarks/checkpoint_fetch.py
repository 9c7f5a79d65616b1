"""The checkpoint fetch: how fast its verifier is, and what a fleet fetch costs the Hub.

    .venv/bin/python benchmarks/checkpoint_fetch.py [--files 4] [--file-mib 128] [--sizes 1 2 4]

On one set of synthetic shards, published as a repository on the lab's Hub (run as root, no lab up):
1. verification throughput of k3ops' verifier (parallel sha256) against `sha256sum` over the same
   files one after another, and against `hf cache verify` (huggingface_hub's own verifier), as ratios
   (files in the page cache, best of three);
2. `deploys/model.py` fetching that repository on 1, 2 and 4 hosts: bytes served by the Hub and wall
   time (the whole deploy, and the longest fetch unit).
Targets: verifier / serial sha256sum >= 1.8 on 2 cores; Hub bytes = one copy whatever the host count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from k3ops.onhost.checkpoint import verify
from k3ops.onhost.checkpoint.manifest import FileEntry
from k3ops_lab import hub, state

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
from tests.lab.conftest import lab_inventory  # noqa: E402  (the lab tests' own variant-inventory helper)

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
HF = str(Path(sys.executable).parent / "hf")
REPO_ID = "k3ops-bench/shards"
MODEL_NAME = "bench"
MIB = 1024 * 1024


def k3ops(*args: str, capture: bool = False) -> str:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=True, cwd=REPO_ROOT, text=True,
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL).stdout


def make_shards(directory: Path, count: int, size_mib: int) -> None:
    directory.mkdir(parents=True)
    for index in range(count):
        with open(directory / f"model-{index + 1:05d}-of-{count:05d}.safetensors", "wb") as file:
            for _ in range(size_mib):
                file.write(os.urandom(MIB))


def best_of(runs: int, action) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_verifier(directory: Path, revision: str) -> dict[str, float]:
    paths = sorted(str(path) for path in directory.iterdir())
    sums = subprocess.run(["sha256sum", *paths], check=True, capture_output=True, text=True).stdout.split("\n")
    digests = {Path(line.split()[1]).name: line.split()[0] for line in sums if line}
    entries = [FileEntry(Path(path).name, Path(path).stat().st_size, digests[Path(path).name]) for path in paths]
    total = sum(entry.size for entry in entries)

    def ours():
        assert verify.problems(directory, entries) == {}

    def serial():
        subprocess.run(["sha256sum", *paths], check=True, stdout=subprocess.DEVNULL)

    def huggingface():
        # The repository's .gitattributes is not among the shards: hf reports it missing, and checks the rest.
        subprocess.run([HF, "cache", "verify", REPO_ID, "--revision", revision, "--local-dir", str(directory)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "HF_ENDPOINT": hub.hub_url()})

    seconds = {"k3ops verifier": best_of(3, ours), "sha256sum, serial": best_of(3, serial),
               "hf cache verify": best_of(3, huggingface)}
    print(f"\nverification of {len(entries)} files, {total / MIB:.0f} MiB, {os.cpu_count()} cores (best of 3):")
    for name, value in seconds.items():
        print(f"  {name:<20}{value:>8.2f} s{total / MIB / value:>10.0f} MiB/s")
    print(f"  k3ops / sha256sum serial = {seconds['sha256sum, serial'] / seconds['k3ops verifier']:.2f}x (target >= 1.8)")
    print(f"  k3ops / hf cache verify  = {seconds['hf cache verify'] / seconds['k3ops verifier']:.2f}x")
    return seconds


def fleet_fetch(scratch: Path, revision: str, hosts: list[str], total: int) -> None:
    """One fleet fetch into empty caches. Each size gets a model name (and fetch unit) of its own: seen in
    the lab, restarting a fetch unit right after one that wrote 512 MiB failed with 219/CGROUP (systemd
    could not remove the old unit's cgroup inside the container)."""
    name = f"{MODEL_NAME}-{len(hosts)}"
    inventory = lab_inventory(scratch / f"{name}.py", model_cache_headroom_gib=0.25,
                              model={"repo_id": REPO_ID, "revision": revision, "name": name})
    start = time.monotonic()
    limits = [option for host in hosts for option in ("--limit", host)]
    result = subprocess.run([PYINFRA, "-y", inventory, *limits, "deploys/model.py"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(result.stdout[-3000:] + result.stderr[-3000:])
    hub_bytes, fetch_seconds = 0, 0.0
    for host in hosts:
        store = json.loads(k3ops("lab", "ssh", host, f"cat /srv/k3ops/models/{name}/state.json", capture=True))
        hub_bytes += store["bytes_from_hub"]
        fetch_seconds = max(fetch_seconds, store["fetch_seconds"])
        k3ops("lab", "ssh", host, f"rm -rf /srv/k3ops/models/{name}")  # room for the next size
    print(f"{len(hosts):>5}{wall:>10.1f}{fetch_seconds:>12.1f}{hub_bytes / MIB:>12.0f}{hub_bytes / total:>14.2f}",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=128)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    if state.load() is not None:
        sys.exit("a lab is up; run `k3ops lab down` first")
    largest = max(args.sizes)
    k3ops("lab", "up", "--hosts", str(largest), *sum((["--profile", "cpu"] for _ in range(largest)), []))
    shards = state.CACHE_DIR / "bench-shards"
    shutil.rmtree(shards, ignore_errors=True)
    try:
        make_shards(shards, args.files, args.file_mib)
        revision = hub.add_repository(REPO_ID, shards)
        bench_verifier(shards, revision)
        scratch = Path(state.STATE_DIR) / "bench"
        scratch.mkdir(parents=True, exist_ok=True)
        hosts = [state.host_name(index) for index in range(largest)]
        total = args.files * args.file_mib * MIB
        print(f"\nfleet fetch of {total / MIB:.0f} MiB (deploys/model.py; a row also provisions the hosts new to it):")
        print(f"{'hosts':>5}{'deploy s':>10}{'fetch s':>12}{'Hub MiB':>12}{'Hub copies':>14}")
        for size in args.sizes:
            fleet_fetch(scratch, revision, hosts[:size], total)
    finally:
        k3ops("lab", "down")
        hub.remove_repository(REPO_ID)
        shutil.rmtree(shards, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
