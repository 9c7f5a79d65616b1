"""A rolling upgrade's cost and its floor of service: `k3ops upgrade driver` and `k3ops upgrade model` on 4 and 8
lab hosts with --max-unavailable 1 and 2.

    .venv/bin/python benchmarks/rolling_upgrade.py [--hosts 4,8] [--release driver,model]
    .venv/bin/python benchmarks/rolling_upgrade.py --chaos

As root, no lab up: brings up 8 h200x8 hosts serving the tiny model at driver 580.105.08 behind the lab's
load balancer (deploys/k3.py, as the lab test does), then runs the rollouts one after another, each moving the
first N hosts to the other driver (so every run upgrades or rolls back: the same command), while a poller sends
chat completions to every host the balancer lists. Prints each rollout's wall time, its time per host, the
speed-up of max-unavailable 2 over 1, and the lowest share of the N hosts the poller saw serving, against the
1 - max-unavailable/N the budget promises. The model rollouts move the same hosts between the tiny model's two
revisions (staged on every host first, then switched a host at a time, no reboot), and print the files the lab's
Hub served for each: the first one's new files once, a move back to a revision still cached none. The lab's hosts
share this machine's cores, so deploys on several hosts at once do not run as fast as on separate machines: the
speed-up is a floor.

With --chaos (no lab, no root): what a dead controller costs. The chaos matrix's runs (tests/unit/
test_upgrade_chaos.py: the real rollout against a simulated fleet of three 2-node groups on bare metal's times, a
deploy of 4 minutes and a reboot of 10) killed in each state, its process group or the controller alone, and
resumed at once; each run's rollout time on that clock against the uninterrupted one's, and the most hosts out of
service at once against the budget.
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
from k3ops_lab import hub  # noqa: E402
from tests.lab.balanced_fleet import Poller, serve_behind_the_balancer  # noqa: E402
from tests.lab.test_upgrade import NEW, OLD, upgrade_inventory  # noqa: E402

HOSTS = [f"gpu-{index:02d}" for index in range(1, 9)]


def k3ops(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=check, cwd=REPO_ROOT, text=True,
                          capture_output=True)


def chaos() -> int:
    import pytest

    from tests.unit.upgrade_fleet import BUDGET, WAY, Fleets, cuda_index, kill_points, reboot_points, rolled

    with tempfile.TemporaryDirectory() as scratch, cuda_index(Path(scratch)) as repository, \
            pytest.MonkeyPatch.context() as monkeypatch:
        fleets = Fleets(Path(scratch), repository, monkeypatch)
        clean = fleets.new()
        if rolled(clean) != 0:
            return 1
        print(f"uninterrupted: {clean.clock / 60:.0f} min on the bare-metal clock, at most {clean.worst} hosts out "
              f"(budget {BUDGET})")
        points = {(state, where): move for state in WAY for where, move in kill_points(clean, state).items()}
        points.update({("a host's reboot", where): move for where, move in reboot_points(clean).items()})
        added = []
        for (state, where), move in points.items():
            for whole_group, killed in ((True, "process group"), (False, "controller alone")):
                fleet = fleets.new()
                status = rolled(fleet, move, whole_group)
                added.append(fleet.clock - clean.clock)
                print(f"killed in {state} ({where} move), {killed}: {'done' if status == 0 else 'NOT DONE'}, "
                      f"{(fleet.clock - clean.clock) / 60:+.1f} min, at most {fleet.worst} hosts out")
        print(f"{len(added)} killed runs: {sum(added) / len(added) / 60:+.1f} min on average, "
              f"{max(added) / 60:+.1f} min at most, over the uninterrupted {clean.clock / 60:.0f} min")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="4,8", help="comma-separated fleet sizes (at most 8)")
    parser.add_argument("--release", default="driver,model", help="what the rollouts move: driver, model or both")
    parser.add_argument("--chaos", action="store_true", help="the chaos runs' added time (simulated fleet, no lab)")
    arguments = parser.parse_args()
    if arguments.chaos:
        return chaos()
    counts = [int(count) for count in arguments.hosts.split(",")]
    k3ops("lab", "up", "--hosts", str(max(counts)), *[word for _ in range(max(counts)) for word in ("--profile", "h200x8")])
    try:
        with tempfile.TemporaryDirectory() as scratch:
            os.environ["XDG_STATE_HOME"] = str(Path(scratch) / "state")
            inventory, balancer = upgrade_inventory(Path(scratch))
            serve_behind_the_balancer(inventory, balancer, HOSTS[:max(counts)])
            moves = {"driver": (NEW, OLD), "model": tuple(reversed(hub.TINY_MODEL_REVISIONS))}
            for release in arguments.release.split(","):
                if not rollouts(release, moves[release], inventory, balancer, counts):
                    return 1
    finally:
        k3ops("lab", "down")
    return 0


def rollouts(release: str, versions: tuple[str, str], inventory: str, balancer: Path, counts: list[int]) -> bool:
    """`k3ops upgrade RELEASE` on the first N hosts for each N, with max-unavailable 1 then 2, each to the other of
    `versions` (the first: the one the fleet does not run), printing what each cost."""
    timings, index = {}, 0
    for count in counts:
        for allowed in (1, 2):
            hosts, version = HOSTS[:count], versions[index % 2]
            index += 1
            served = len(hub.downloads())
            poller = Poller(inventory, balancer, hosts)
            poller.start()
            started = time.monotonic()
            result = k3ops("upgrade", release, inventory, "--to", version, "--max-unavailable", str(allowed),
                           "--limit", ",".join(hosts), check=False)
            seconds = time.monotonic() - started
            poller.stopping.set()
            poller.join()
            if result.returncode != 0:
                print(result.stdout[-3000:] + result.stderr[-3000:])
                return False
            timings[count, allowed] = seconds
            promised = 1 - allowed / count
            print(f"{release}: {count} hosts, max-unavailable {allowed}, to {version}: {seconds:.0f} s "
                  f"({seconds / count:.0f} s per host); lowest share serving {poller.least_serving:.2f} "
                  f"(budget's floor {promised:.2f}: {'kept' if poller.least_serving >= promised else 'BROKEN'}), "
                  f"at most {poller.most_out} out, {len(poller.dropped)} dropped requests, {poller.polls} polls, "
                  f"{len(hub.downloads()) - served} files from the Hub")
        print(f"{release}: {count} hosts: max-unavailable 2 took {timings[count, 2] / timings[count, 1]:.2f}x the "
              "time of max-unavailable 1")
    return True


if __name__ == "__main__":
    sys.exit(main())
