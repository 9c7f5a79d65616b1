"""QEMU for the lab's VM hosts: the accelerator this machine can use, and the parts of every command line.

KVM only where a probe boot succeeds: on a machine that is itself a VM without nested virtualisation,
/dev/kvm can exist while QEMU with `-cpu host` aborts (it cannot set the host's MSRs) and other CPU
models hang after the firmware. The probe boots the image's kernel with no root under KVM: reaching the
kernel's "cannot mount root" panic proves it runs; anything else within the probe's time means TCG.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from . import state

QEMU = "qemu-system-x86_64"
PROBE_TIMEOUT_SECONDS = 30
PROBE_BOOTED = "VFS: Unable to mount root fs"
# Under TCG, qemu64 (x86-64's baseline): with `max`, glibc and OpenSSL pick their AVX2 and SSE4.2 routines,
# which TCG emulates in helpers; measured in a VM lab host, qemu64 boots 28% faster in userspace and runs dpkg
# 27% and Python 35% faster (Nehalem, with SSE4.2, was slower than either).
CPU_MODEL = {"kvm": "host", "tcg": "qemu64"}


class Console:
    """A VM's serial console, appended to a file (the lab's console.log)."""

    def __init__(self, path: Path):
        self.path = path

    def option(self) -> list[str]:
        return ["-chardev", f"file,id=console,path={self.path},append=on", "-serial", "chardev:console"]

    def text(self) -> str:
        return self.path.read_text(errors="replace") if self.path.exists() else ""

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


def accelerator(kernel: Path) -> str:
    """"kvm" when a probe boot of `kernel` under KVM reaches the kernel, else "tcg"; probed once per boot
    of this machine."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    found = state.CACHE_DIR / "qemu" / f"accelerator-{boot_id}"
    if found.exists():
        return found.read_text().strip()
    chosen = "kvm" if os.access("/dev/kvm", os.R_OK | os.W_OK) and _kvm_boots(kernel) else "tcg"
    found.parent.mkdir(parents=True, exist_ok=True)
    found.write_text(chosen + "\n")
    return chosen


def _kvm_boots(kernel: Path) -> bool:
    command = [QEMU, "-accel", "kvm", "-cpu", CPU_MODEL["kvm"], "-m", "256", "-nodefaults", "-display", "none",
               "-serial", "stdio", "-no-reboot", "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1"]
    try:
        probe = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return False
    return PROBE_BOOTED in probe.stdout


def qemu_command(*, name: str, accel: str, disks: list[str], console: Console, memory_mib: int = 1024, cpus: int = 1,
                 extra: list[str] = ()) -> list[str]:
    """A VM with no device QEMU would add by itself (no default NIC: its user networking would be a way out),
    `disks` as -drive values, and the serial console on `console`."""
    return [QEMU, "-name", name, "-machine", "q35", "-accel", accel, "-cpu", CPU_MODEL[accel],
            "-m", str(memory_mib), "-smp", str(cpus), "-nodefaults", "-display", "none", "-monitor", "none",
            *console.option(), *(option for disk in disks for option in ("-drive", disk)), *extra]
