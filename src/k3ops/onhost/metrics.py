"""What only k3ops knows about a host, as Prometheus series for node_exporter's textfile collector, run by a
systemd timer on the host (standard library only).

The exporters see the hardware; they cannot see that the loaded driver is not the installed one, which checkpoint
revision the engine serves and whether it was verified, what the last fabric check found, or that a rollout holds
the host in maintenance (an alert rule inhibits the host's other alerts with it). The file is replaced in one
rename, so the collector never reads half of it, and carries its own time, so a stopped timer shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from .checkpoint.manifest import write_atomically
from .drivers import amdgpu_differs, nvml_version
from .layout import (ENGINE_UNIT, FABRIC_CHECK_RESULT, MAINTENANCE_MARKER, METRICS_FILE, MODEL_CONFIG_DIR,
                     STORE_STATE_FILE, model_dir)

PREFIX = "k3ops_"
NVML_LIBRARY = f"/usr/lib/{os.uname().machine}-linux-gnu/libnvidia-ml.so.1"
AMDGPU_PACKAGE = "amdgpu-dkms"


def label_value(value: str) -> str:
    """A label value as the text exposition format reads it back: backslash, quote and line feed escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Page:
    """Gauges in the text exposition format: one HELP and TYPE per family, its samples after them."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[str]]] = {}

    def add(self, name: str, help_text: str, value: float, **labels: str) -> None:
        family = PREFIX + name
        _, samples = self.families.setdefault(family, (help_text, []))
        selector = ",".join(f'{key}="{label_value(text)}"' for key, text in labels.items())
        number = str(int(value)) if float(value).is_integer() else repr(float(value))
        samples.append(f"{family}{{{selector}}} {number}" if selector else f"{family} {number}")

    def text(self) -> str:
        lines = []
        for family, (help_text, samples) in self.families.items():
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} gauge", *samples]
        return "\n".join(lines) + "\n"


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _json(path: str | Path) -> dict | None:
    text = _read(path)
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _run(*argv: str) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _timestamp(text) -> float | None:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def drivers(page: Page) -> None:
    """Each GPU driver present: its loaded module's version, the installed one, and whether they differ (a host
    that needs a reboot, or whose userspace no longer matches its kernel module)."""
    try:
        library = os.path.realpath(NVML_LIBRARY, strict=True)
    except OSError:
        library = ""
    found = {"nvidia": (_read("/sys/module/nvidia/version"), nvml_version(library)),
             "amdgpu": (_read("/sys/module/amdgpu/version"),
                        _run("dpkg-query", "--showformat=${Version}", "--show", AMDGPU_PACKAGE))}
    for module, (loaded, installed) in found.items():
        if not loaded and not installed:
            continue
        differs = amdgpu_differs(loaded, installed) if module == "amdgpu" else bool(loaded and installed
                                                                                  and loaded != installed)
        page.add("gpu_driver_info", "The GPU driver: its loaded kernel module's version and the installed one.", 1,
                 module=module, loaded=loaded or "", installed=installed or "")
        page.add("gpu_driver_mismatch", "1 when the loaded GPU kernel module is not the installed driver's "
                 "(not loaded, or loaded from another release: a reboot is due).",
                 int(differs or not loaded), module=module)


def models(page: Page, config_dir: Path) -> None:
    """Each model the host keeps: the revision pinned in its data and the one active, and its last verification."""
    for config_file in sorted(config_dir.glob("*.json")):
        config = _json(config_file) or {}
        name, pinned, cache = config.get("name"), config.get("revision"), config.get("cache_path")
        if not (name and pinned and cache):
            continue
        state = _json(Path(model_dir(cache, name)) / STORE_STATE_FILE) or {}
        active = state.get("active") or ""
        page.add("model_revision_info", "A model's pinned checkpoint revision and the one active on the host.", 1,
                 model=name, pinned=pinned, active=active)
        page.add("model_revision_pinned", "1 when the active checkpoint revision is the pinned one.",
                 int(active == pinned), model=name)
        if active:  # a first fetch has nothing to verify yet
            page.add("model_verified", "1 when the last verification of the active checkpoint found every file "
                     "intact.", int(state.get("verification") == "ok"), model=name)
        verified_at = _timestamp(state.get("verified_at"))
        if verified_at is not None:
            page.add("model_verified_timestamp_seconds", "When the checkpoint was last verified.", verified_at,
                     model=name)


def fabric_check(page: Page, result_file: Path) -> None:
    """The last fabric check's verdict and time (no series: never checked)."""
    result = _json(result_file)
    if result is None:
        return
    page.add("fabric_check_passed", "1 when the last NCCL/RCCL fabric check of the host passed.",
             int(result.get("verdict") == "pass"), verdict=str(result.get("verdict", "")))
    checked_at = _timestamp(result.get("time"))
    if checked_at is not None:
        page.add("fabric_check_timestamp_seconds", "When the host's fabric was last checked.", checked_at)


def maintenance(page: Page, marker_file: Path) -> None:
    """Whether a rollout or a person holds the host in maintenance, and until when (alert rules silence the
    host's other alerts while the marker stands, and page when its deadline passes)."""
    marker = _json(marker_file)
    page.add("maintenance", "1 while a maintenance marker stands on the host (a rollout's or a person's).",
             int(marker is not None), state=str((marker or {}).get("state", "")), by=str((marker or {}).get("by", "")))
    deadline = _timestamp((marker or {}).get("deadline"))
    if deadline is not None:
        page.add("maintenance_deadline_timestamp_seconds", "Until when the maintenance marker is to be believed.",
                 deadline)


def engine(page: Page, unit: str) -> None:
    """The engine unit's state and systemd's count of its automatic restarts since it was last started by hand."""
    shown = _run("systemctl", "show", unit, "--property=LoadState", "--property=ActiveState",
                 "--property=NRestarts")
    properties = dict(line.split("=", 1) for line in (shown or "").splitlines() if "=" in line)
    if properties.get("LoadState") != "loaded":
        return
    page.add("engine_active", "1 while the engine's unit is active.", int(properties.get("ActiveState") == "active"),
             unit=unit)
    restarts = properties.get("NRestarts", "")
    page.add("engine_restarts", "systemd's automatic restarts of the engine's unit.",
             int(restarts) if restarts.isdigit() else 0, unit=unit)


def page(config_dir: Path = Path(MODEL_CONFIG_DIR), fabric_result: Path = Path(FABRIC_CHECK_RESULT),
         marker_file: Path = Path(MAINTENANCE_MARKER), unit: str = ENGINE_UNIT) -> str:
    found = Page()
    drivers(found)
    models(found, config_dir)
    fabric_check(found, fabric_result)
    maintenance(found, marker_file)
    engine(found, unit)
    found.add("metrics_timestamp_seconds", "When k3ops last wrote these series.", time.time())
    return found.text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k3ops-metrics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(METRICS_FILE), help="the .prom file to replace")
    parser.add_argument("--get", metavar="URL", help="print the /metrics page an exporter serves at URL, and exit "
                                                     "(the host checks read the exporters with it)")
    args = parser.parse_args(argv)
    if args.get:
        try:
            with urllib.request.urlopen(args.get, timeout=10) as response:
                sys.stdout.write(response.read().decode())
        except (OSError, ValueError) as error:
            print(f"{args.get}: {error}", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out, page())
    args.out.chmod(0o644)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
