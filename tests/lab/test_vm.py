"""A VM lab host (`k3ops lab up --backend vm`): Debian's cloud kernel booted by GRUB from the VM's disk, with
two emulated NVMe devices, a kernel log of its own, and nothing left behind by `lab down`. Run beside the
unit tests (scripts/test), so it must stay about as short as they are.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from k3ops.lab import lab as lab_module
from k3ops.lab import network, state

from .conftest import k3ops, on_host, reboot

LAB_PROFILES = ("cpu",)
LAB_BACKENDS = ("vm",)
LAB_NVME_DEVICES = 2
HOST = "gpu-01"


def test_the_host_runs_its_own_kernel_booted_by_grub(lab):
    status = json.loads(k3ops("lab", "status", "--json").stdout)["hosts"]
    assert [(host["name"], host["backend"], host["state"]) for host in status] == [(HOST, "vm", "running")]
    release = on_host(HOST, "uname -r").stdout.strip()
    assert release != os.uname().release and release.endswith("-cloud-amd64")
    assert on_host(HOST, "systemd-detect-virt --vm").stdout.strip() == "qemu"
    command_line = on_host(HOST, "cat /proc/cmdline").stdout.split()
    assert command_line[0] == f"BOOT_IMAGE=/boot/vmlinuz-{release}" and "console=ttyS0,115200" in command_line
    # The kernel's log is the VM's own, from this boot of this kernel.
    assert f"Linux version {release}" in on_host(HOST, "journalctl -k -b -o cat").stdout
    assert on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout != Path("/proc/sys/kernel/random/boot_id").read_text()
    disks = [line.split() for line in on_host(HOST, "lsblk -d -n -o NAME,TRAN").stdout.splitlines()]
    assert sorted(disk[0] for disk in disks if disk[1:] == ["nvme"]) == ["nvme0n1", "nvme1n1"]


def grub_boots() -> int:
    """How many times GRUB has booted the host's kernel, from its serial console."""
    console = lab_module.console_log(state.load().host(HOST)).read_text(errors="replace")
    return console.count("Booting `Debian GNU/Linux'")


def test_a_reboot_goes_through_the_firmware_and_grub_again(lab):
    boot_id, boots = on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout, grub_boots()
    on_host(HOST, "echo kept > /var/tmp/k3ops-lab-before-reboot")
    reboot(HOST)
    assert on_host(HOST, "cat /proc/sys/kernel/random/boot_id").stdout != boot_id
    assert float(on_host(HOST, "cut -d' ' -f1 /proc/uptime").stdout) < 120  # a new kernel, not a restarted container
    assert on_host(HOST, "cat /var/tmp/k3ops-lab-before-reboot").stdout.strip() == "kept"
    assert grub_boots() == boots + 1


def test_down_stops_the_vm_and_removes_its_tap(lab):
    k3ops("lab", "down")
    assert subprocess.run(["pgrep", "-f", "qemu-system-x86_64"], capture_output=True).returncode == 1
    assert network.lab_taps() == []
    assert not state.STATE_DIR.exists()
