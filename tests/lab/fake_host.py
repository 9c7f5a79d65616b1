"""A lab host's root laid out in a temporary directory, as the simulators and the boot layer see it."""

import json
import os
from datetime import UTC, datetime

from k3ops_lab.profiles import PROFILES
from k3ops_lab.sim import nvidia_devices
from k3ops_lab.sim.host import (AMDGPU_MODULE_VERSION, HARDWARE_DOCUMENT, KERNEL_MODULE_STAGING, PACKAGE_VERSIONS,
                                ROCM_VERSION_FILE, SimHost)

DRIVER = "580.105.08"
FIXED_TIME = datetime(2026, 7, 3, 22, 11, 9, 353000, tzinfo=UTC)
LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"


def write(root, relative, content):
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_text(content)


def bare_host(root, profile="h200x8", hostname="gpu-01", faults=None, staged_modules=None, **nic_changes):
    """A host with `profile`'s hardware and no driver; `staged_modules` as driver packages leave them
    for the boot layer ({"nvidia": {"version": ..., "flavour": ...}}); `nic_changes` apply to every NIC."""
    hardware = PROFILES[profile].hardware(hostname)
    hardware["faults"] = faults or {}
    for nic in hardware["nics"]:
        nic.update(nic_changes)
    write(root, HARDWARE_DOCUMENT, json.dumps(hardware))
    for module, build in (staged_modules or {}).items():
        write(root, f"{KERNEL_MODULE_STAGING}/{module}", json.dumps(build))
    return SimHost(root), hardware


def amd_host(root, rocm="7.0.2-56", amdgpu="6.14.14"):
    """An mi355x8 host with ROCm `rocm` installed and amdgpu `amdgpu` loaded (empty: not loaded)."""
    host, hardware = bare_host(root, "mi355x8", hostname="mi-01")
    for relative, content in ((ROCM_VERSION_FILE, rocm), (AMDGPU_MODULE_VERSION, amdgpu)):
        if content:
            write(root, relative, content + "\n")
    return host, hardware


def nvidia_host(root, profile="h200x8", driver=DRIVER, module=DRIVER, persistence=True, faults=None,
                toolkit=None, nccl="2.28.7", hostname="gpu-01", dcgm="4.4.1"):
    """A host with `profile`'s hardware, the NVML library of `driver` and the kernel module `module` loaded
    (None: not loaded); persistenced running, DCGM, a container toolkit and NCCL installed if asked."""
    _, hardware = bare_host(root, profile, hostname, faults)
    if dcgm is not None:
        write(root, f"{PACKAGE_VERSIONS}/datacenter-gpu-manager-4-core", dcgm + "\n")
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
        write(root, f"{PACKAGE_VERSIONS}/nvidia-container-toolkit", toolkit + "\n")
    if nccl is not None:
        (libraries / f"libnccl.so.{nccl}").write_text("simulated NCCL\n")
        os.symlink(f"libnccl.so.{nccl}", libraries / "libnccl.so.2")
    return SimHost(root), hardware


def freeze_clock(monkeypatch):
    monkeypatch.setattr(nvidia_devices, "now", lambda: FIXED_TIME)


def run(tool, capsys, host, *args):
    """Run a tool (a module's `main`, or an entry function) on `host`: (status, stdout, stderr)."""
    status = getattr(tool, "main", tool)(list(args), host)
    captured = capsys.readouterr()
    return status, captured.out, captured.err
