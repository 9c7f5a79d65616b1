"""A rolling driver upgrade's cost and its floor of service: `k3ops upgrade driver` on 4 and 8 lab hosts with
--max-unavailable 1 and 2.

    .venv/bin/python benchmarks/rolling_upgrade.py [--hosts 4,8]

As root, no lab up: brings up 8 h200x8 hosts serving the tiny model at driver 580.105.08 behind the lab's
load balancer (deploys/k3.py, as the lab test does), then runs the rollouts one after another, each moving the
first N hosts to the other driver (so every run upgrades or rolls back: the same command), while a poller sends
chat completions to every host the balancer lists. Prints each rollout's wall time, its time per host, the
speed-up of max-unavailable 2 over 1, and the lowest share of the N hosts the poller saw serving, against the
1 - max-unavailable/N the budget promises. The lab's hosts share this machine's cores, so deploys on several
hosts at once do not run as fast as on separate machines: the speed-up is a floor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
from tests.lab.test_upgrade import NEW, OLD, Poller, serve_behind_the_balancer, upgrade_inventory  # noqa: E402

HOSTS = [f"gpu-{index:02d}" for index in range(1, 9)]


def k3ops(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=check, cwd=REPO_ROOT, text=True,
                          capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="4,8", help="comma-separated fleet sizes (at most 8)")
    counts = [int(count) for count in parser.parse_args().hosts.split(",")]
    k3ops("lab", "up", "--hosts", str(max(counts)), *[word for _ in range(max(counts)) for word in ("--profile", "h200x8")])
    try:
        with tempfile.TemporaryDirectory() as scratch:
            os.environ["XDG_STATE_HOME"] = str(Path(scratch) / "state")
            inventory, balancer = upgrade_inventory(Path(scratch))
            serve_behind_the_balancer(inventory, balancer, HOSTS[:max(counts)])
            version, timings = NEW, {}
            for count in counts:
                for allowed in (1, 2):
                    hosts = HOSTS[:count]
                    poller = Poller(inventory, balancer, hosts)
                    poller.start()
                    started = time.monotonic()
                    result = k3ops("upgrade", "driver", inventory, "--to", version, "--max-unavailable", str(allowed),
                                   "--limit", ",".join(hosts), check=False)
                    seconds = time.monotonic() - started
                    poller.stopping.set()
                    poller.join()
                    if result.returncode != 0:
                        print(result.stdout[-3000:] + result.stderr[-3000:])
                        return 1
                    timings[count, allowed] = seconds
                    promised = 1 - allowed / count
                    print(f"{count} hosts, max-unavailable {allowed}, to {version}: {seconds:.0f} s "
                          f"({seconds / count:.0f} s per host); lowest share serving {poller.least_serving:.2f} "
                          f"(budget's floor {promised:.2f}: {'kept' if poller.least_serving >= promised else 'BROKEN'}), "
                          f"at most {poller.most_out} out, {len(poller.dropped)} dropped requests, {poller.polls} polls")
                    version = OLD if version == NEW else NEW
                print(f"{count} hosts: max-unavailable 2 took {timings[count, 2] / timings[count, 1]:.2f}x the time "
                      "of max-unavailable 1")
    finally:
        k3ops("lab", "down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
