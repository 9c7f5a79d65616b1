"""What watching the fleet costs, and how soon it speaks: the exporters on a lab host, Prometheus on 8 of them.

    .venv/bin/python benchmarks/monitoring.py [--seconds 60]

As root, no lab up: brings up 8 h200x8 hosts, deploys deploys/gpu_host.py on them (node_exporter, k3ops' series,
the DCGM exporter), and points the lab's Prometheus and Alertmanager at them (`k3ops monitoring config`, a 1 s
scrape and evaluation). Then, over `--seconds`:
1. node_exporter's and the DCGM exporter's CPU seconds per scrape and resident memory on gpu-01 (the DCGM
   exporter is the lab's stand-in: its figures say what the lab costs, not what NVIDIA's costs);
2. Prometheus' scrape duration per target, median and worst, for the node and dcgm jobs of the 8 hosts;
3. the rule group's evaluation time (its last, as Prometheus' rules API reports it);
4. from an injected power brake on gpu-01 to K3GpuPowerBrake firing, against the scrape and evaluation interval
   (the floor: the fault is seen at the next scrape and fires at the evaluation after it).
Targets: a scrape of either exporter under 0.1 s; the rules evaluated in under 1% of their interval; fault to
alert within 5 intervals.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from k3ops_lab import monitoring

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
from tests.lab.conftest import lab_inventory  # noqa: E402  (the lab tests' own variant-inventory helper)

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
HOSTS = [f"gpu-{index:02d}" for index in range(1, 9)]
INTERVAL_SECONDS = 1.0  # monitoring.LAB_INTERVAL
EXPORTERS = {"node_exporter": "prometheus-node-exporter", "DCGM exporter": "nvidia-dcgm-exporter"}


def k3ops(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "k3ops.cli", *args], check=True, cwd=REPO_ROOT, text=True,
                          capture_output=True).stdout


def on_host(host: str, command: str) -> str:
    return k3ops("lab", "ssh", host, command)


def process_usage(host: str, unit: str) -> tuple[float, int]:
    """A unit's main process: CPU seconds used so far, and resident memory in KiB."""
    pid = on_host(host, f"systemctl show -p MainPID --value {unit}").strip()
    stat = on_host(host, f"cat /proc/{pid}/stat").split(")")[-1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in on_host(host, f"cat /proc/{pid}/status").splitlines()
               if line.startswith("VmRSS:"))
    return (int(stat[11]) + int(stat[12])) / ticks, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to watch the exporters")
    args = parser.parse_args()
    k3ops("lab", "up", "--hosts", str(len(HOSTS)), *[word for _ in HOSTS for word in ("--profile", "h200x8")])
    try:
        with tempfile.TemporaryDirectory() as scratch:
            inventory = lab_inventory(Path(scratch) / "fleet.py")
            subprocess.run([PYINFRA, "-y", inventory, "deploys/gpu_host.py"], check=True, cwd=REPO_ROOT,
                           capture_output=True)
            monitoring.watch(Path(inventory))
            monitoring.wait(lambda: len(monitoring.query("up == 1")) >= 2 * len(HOSTS), 120, "every target up")
            before = {name: process_usage("gpu-01", unit) for name, unit in EXPORTERS.items()}
            time.sleep(args.seconds)
            for name, unit in EXPORTERS.items():
                cpu, rss = process_usage("gpu-01", unit)
                per_scrape = (cpu - before[name][0]) / (args.seconds / INTERVAL_SECONDS)
                print(f"{name} on gpu-01: {per_scrape * 1000:.1f} ms CPU per scrape, {rss / 1024:.1f} MiB resident")
            for job in ("node", "dcgm"):
                durations = [series["value"] for series in
                             monitoring.query(f'avg_over_time(scrape_duration_seconds{{job="{job}"}}[30s])')]
                print(f"{job} scrape over {len(durations)} hosts: median {statistics.median(durations) * 1000:.1f} ms, "
                      f"worst {max(durations) * 1000:.1f} ms ({max(durations) / 0.1:.2f}x the 0.1 s target)")
            evaluation = monitoring.rule_groups()[0]["evaluationTime"]
            print(f"rule evaluation: {evaluation * 1000:.2f} ms, {evaluation / INTERVAL_SECONDS:.4f} of its interval "
                  f"(target under 0.01)")
            injected = time.monotonic()
            k3ops("lab", "fault", "gpu-01", "power-brake")
            monitoring.wait(lambda: [alert for alert in monitoring.alerts() if alert["alertname"] == "K3GpuPowerBrake"
                                     and alert["state"] == "firing"], 60, "K3GpuPowerBrake firing", every=0.1)
            seen = time.monotonic() - injected
            print(f"power brake to K3GpuPowerBrake firing: {seen:.2f} s, {seen / INTERVAL_SECONDS:.1f} intervals "
                  f"(target within 5)")
            monitoring.stop()
    finally:
        k3ops("lab", "down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
