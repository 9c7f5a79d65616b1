"""A lab host's root laid out in a temporary directory, as the NVIDIA simulators see it."""

import json
import os
from datetime import UTC, datetime

from k3ops.lab.profiles import PROFILES
from k3ops.lab.sim import nvidia_devices
from k3ops.lab.sim.host import SimHost

DRIVER = "580.105.08"
FIXED_TIME = datetime(2026, 7, 3, 22, 11, 9, 353000, tzinfo=UTC)
LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"


def nvidia_host(root, profile="h200x8", driver=DRIVER, module=DRIVER, persistence=True, faults=None,
                toolkit=None, nccl="2.28.7", hostname="gpu-01"):
    """A host with `profile`'s hardware, the NVML library of `driver` and the kernel module `module` loaded
    (None: not loaded); persistenced running, a container toolkit and NCCL installed if asked."""
    hardware = PROFILES[profile].hardware(hostname)
    hardware["faults"] = faults or {}
    (root / "etc/k3ops-lab").mkdir(parents=True)
    (root / "etc/k3ops-lab/hardware.json").write_text(json.dumps(hardware))
    libraries = root / LIBRARY_DIR
    libraries.mkdir(parents=True)
    (libraries / f"libnvidia-ml.so.{driver}").write_text("simulated NVML\n")
    os.symlink(f"libnvidia-ml.so.{driver}", libraries / "libnvidia-ml.so.1")
    if module is not None:
        (root / "sys/module/nvidia").mkdir(parents=True)
        (root / "sys/module/nvidia/version").write_text(module + "\n")
    if persistence:
        (root / "run/nvidia-persistenced").mkdir(parents=True)
        (root / "run/nvidia-persistenced/socket").write_text("")
    if toolkit is not None:
        (root / "usr/lib/k3ops-lab-sim/versions").mkdir(parents=True)
        (root / "usr/lib/k3ops-lab-sim/versions/nvidia-container-toolkit").write_text(toolkit + "\n")
    if nccl is not None:
        (libraries / f"libnccl.so.{nccl}").write_text("simulated NCCL\n")
        os.symlink(f"libnccl.so.{nccl}", libraries / "libnccl.so.2")
    return SimHost(root), hardware


def freeze_clock(monkeypatch):
    monkeypatch.setattr(nvidia_devices, "now", lambda: FIXED_TIME)


def run(tool, capsys, host, *args):
    status = tool.main(list(args), host)
    captured = capsys.readouterr()
    return status, captured.out, captured.err
