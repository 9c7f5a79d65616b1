"""A VM lab host: its own kernel, booted by GRUB from a copy-on-write disk of the VM image (vm_image.py),
with emulated NVMe devices, a tap on the lab bridge and a seed disk of its own files (host_files.py).

Everything a container host gets from the lab's stand-ins comes here from the real thing: the kernel's
modules, md, /proc/cmdline from GRUB, sysctl, udev, time sync, dmesg. Only the hardware is simulated:
the seed's hardware document, read by the same simulators and boot layer as on a container host.
A reboot inside the host is QEMU's reset: firmware, GRUB and the kernel again, in the same process.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

from . import network, state
from .debian import Mirrors
from .host_files import HostFile, host_files, new_ssh_host_keys
from .processes import kill_matching, pid_from_file, terminate
from .qemu import Console, accelerator, qemu_command
from .vm_image import DISK_FILE, KERNEL_FILE, SEED_SERIAL

BOOT_TIMEOUT_SECONDS = 600  # TCG: a boot takes about 20 s, a first one with a loaded controller several times that
MEMORY_MIB = 2048
# One: a second vCPU (a TCG thread of its own) boots 8 s faster alone, but in the test suite it takes the CPU the
# container lab's tests need (measured: the VM tests 28 s faster, the container tests 90 s slower).
CPUS = 1
STOP_TIMEOUT_SECONDS = 10
NETWORK_FILE = "etc/systemd/network/10-k3ops-lab.network"


def paths(host: state.LabHost) -> dict[str, Path]:
    directory = host.directory
    return {name: directory / name for name in (DISK_FILE, "seed.tar", "disks", "console.log", "qemu.pid")}


def mac_address(host: state.LabHost) -> str:
    """A locally administered address (QEMU's 52:54:00 prefix) fixed by the host's lab address."""
    return "52:54:00:6b:33:{:02x}".format(int(host.address.rsplit(".", 1)[1]))


def network_file(host: state.LabHost) -> str:
    """systemd-networkd: the lab address on the lab NIC, no gateway, no DNS, nothing learnt from the wire."""
    return (f"[Match]\nMACAddress={mac_address(host)}\n\n[Network]\nAddress={host.address}/{state.PREFIX_LENGTH}\n"
            "LinkLocalAddressing=no\nIPv6AcceptRA=no\n")


def create(host: state.LabHost, lab: state.Lab, image: Path, mirrors: Mirrors, nvme_size_gib: int) -> None:
    """The host's disk over the image, its NVMe devices and seed; idempotent for a host that exists."""
    where = paths(host)
    where["disks"].mkdir(parents=True, exist_ok=True)
    if not where[DISK_FILE].exists():
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(image / DISK_FILE),
                        str(where[DISK_FILE])], check=True, capture_output=True, text=True)
    hardware = host.hardware(nvme_size_gib)
    for disk in hardware["nvme"]:
        backing = where["disks"] / f"{disk['name']}.img"
        if not backing.exists():
            with open(backing, "wb") as sparse:
                sparse.truncate(disk["size_gib"] * 1024**3)
    if not where["seed.tar"].exists():
        files = {**host_files(host, lab, hardware, mirrors), **new_ssh_host_keys(),
                 NETWORK_FILE: HostFile(network_file(host).encode())}
        where["seed.tar"].write_bytes(_tar(files))


def _tar(files: dict[str, HostFile]) -> bytes:
    """A tar of the files, owned by root, with the directories above them (root's .ssh private to root)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        directories = sorted({str(parent) for path in files for parent in Path(path).parents if str(parent) != "."})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o700 if directory == "root/.ssh" else 0o755
            archive.addfile(info)
        for path, file in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(file.content), file.mode
            archive.addfile(info, io.BytesIO(file.content))
    return buffer.getvalue()


def command(host: state.LabHost, image: Path) -> list[str]:
    where = paths(host)
    disks = [f"file={where[DISK_FILE]},if=none,id=root,format=qcow2,cache=unsafe,discard=unmap",
             f"file={where['seed.tar']},if=none,id=seed,format=raw,readonly=on"]
    # The firmware boots the root disk (GRUB in its boot sector), never the seed or an NVMe device.
    devices = ["-device", "virtio-blk-pci,drive=root,bootindex=0",
               "-device", f"virtio-blk-pci,drive=seed,serial={SEED_SERIAL}"]
    for disk in host.hardware()["nvme"]:
        drive = disk["name"]
        devices += ["-drive", f"file={where['disks'] / drive}.img,if=none,id={drive},format=raw,cache=unsafe",
                 "-device", f"nvme,drive={drive},serial={disk['serial']}"]
    return qemu_command(
        name=host.name, accel=accelerator(image / KERNEL_FILE), disks=disks, console=Console(where["console.log"]),
        memory_mib=MEMORY_MIB, cpus=CPUS,
        extra=[*devices, "-netdev", f"tap,id=lab,ifname={network.tap_name(host)},script=no,downscript=no",
               "-device", f"virtio-net-pci,netdev=lab,mac={mac_address(host)}",
               "-daemonize", "-pidfile", str(where["qemu.pid"])])


def start(host: state.LabHost, image: Path) -> None:
    """Start the host's QEMU, which daemonizes: it outlives this command, and a reboot stays inside it."""
    if qemu_pid(host):
        return
    started = subprocess.run(command(host, image), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if started.returncode != 0:
        raise RuntimeError(f"{host.name}: QEMU did not start: {started.stderr.strip()}")


def qemu_pid(host: state.LabHost) -> int | None:
    return pid_from_file(paths(host)["qemu.pid"], str(paths(host)[DISK_FILE]).encode())


def running(host: state.LabHost) -> bool:
    return qemu_pid(host) is not None


def stop(host: state.LabHost) -> None:
    """Power the VM off: its disks are the lab's to throw away, so no guest shutdown is waited for."""
    terminate(lambda: qemu_pid(host), STOP_TIMEOUT_SECONDS, lambda pid: os.kill(pid, signal.SIGKILL))


def destroy(host: state.LabHost) -> None:
    kill_strays(host.directory)
    network.delete_tap(host.name)
    shutil.rmtree(host.directory, ignore_errors=True)


def kill_strays(directory: Path) -> None:
    """Kill any QEMU still running a disk under `directory` (a crashed `lab up`, a lost state file)."""
    marker = f"{directory}/".encode()
    kill_matching(lambda cmdline: cmdline.startswith(b"qemu-system") and marker in cmdline)
