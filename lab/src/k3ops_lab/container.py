"""A container lab host: an overlay of the base image, its NVMe loop devices, its cgroup and its systemd-nspawn.

The host's files, block devices and network namespace outlive its container, so a reboot inside
the host (nspawn exits 133) brings it back by the supervisor with the same disks and address.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import k3ops

from . import state
from .debian import Mirrors
from .host_files import HARDWARE_UNIT, HARDWARE_UNIT_NAME, SIM_ON_HOST, host_files, new_ssh_host_keys
from .processes import kill_matching, pid_from_file, terminate
from .services import vendor_repo_url
from .vendor_repo import KERNEL_PACKAGES_PATH, SIGNING_KEY_PATHS, STAND_IN_DKMS_VERSION

KERNEL_KEYRING = "usr/share/keyrings/k3ops-lab-kernel.asc"
REBOOT_EXIT_STATUS = 133
# How long a rebooting host stays off (its firmware and memory training; minutes on a real GPU server), unless
# `k3ops lab boot-delay` gave it another: short, so that every reboot in the tests costs little, and a test that
# needs bare metal's minutes (a controller resumed while a host reboots) asks for them.
DEFAULT_BOOT_DELAY_SECONDS = 2.0
BOOT_TIMEOUT_SECONDS = 120
NETNS_PATH = "/run/netns"
# nspawn mounts /sys read-only; these tmpfs mounts are where the boot layer writes the hardware.
SIMULATED_SYSFS = ("/sys/module", "/sys/bus/pci", "/sys/firmware")
UDEV_UNIT = """[Unit]
Description=k3ops lab: keeps /dev/disk/by-uuid links as udev would
After=k3ops-lab-hardware.service

[Service]
ExecStart=/usr/bin/python3 -c "import sys; sys.path.insert(0, '/usr/lib/k3ops-lab-sim'); from labsim.boot import main; sys.exit(main(['udev']))"
Restart=always

[Install]
WantedBy=multi-user.target
"""
# Inside a lab host dockerd cannot touch nftables or /proc/sys, and no container can start (the cgroup
# tree is read-only): the lab's environment runs it without them, so the daemon and its config are real.
DOCKERD_DROP_IN = """[Service]
ExecStart=
ExecStart=/usr/sbin/dockerd -H fd:// --iptables=false --ip-forward=false --bridge=none
"""
# timesyncd's unit skips containers and hosts without CAP_SYS_TIME; a lab host is both. Without those
# conditions (an empty one resets them all) it runs as on a real host, so the deploy starts it and a
# rerun finds it running. It still cannot set the clock, which is the controller's: nspawn keeps
# CAP_SYS_TIME out of the container and no ambient capability is asked for; timesyncd logs the failed
# adjustment and keeps running.
TIMESYNCD_DROP_IN = """[Unit]
ConditionVirtualization=
ConditionCapability=

[Service]
AmbientCapabilities=
"""
# Loading a module at run time is the kernel's, and a lab host's kernel is the controller's: the boot layer
# "loads" what the driver packages staged; kmod's modprobe still handles every other module.
MODPROBE_ON_HOST = "usr/local/sbin/modprobe"
MODPROBE = """#!/usr/bin/python3
# k3ops lab: modprobe for the simulated driver's modules (see labsim/boot.py); kmod's for the rest.
import sys
sys.path.insert(0, "/usr/lib/k3ops-lab-sim")
from labsim.boot import modprobe_main
sys.exit(modprobe_main(sys.argv[1:]))
"""
LAB_UNITS = {HARDWARE_UNIT_NAME: ("sysinit.target", HARDWARE_UNIT),
             "k3ops-lab-udev.service": ("multi-user.target", UDEV_UNIT)}
# Where the cgroup hierarchy systemd tracks units in may be mounted: all of /sys/fs/cgroup (cgroup v2),
# /sys/fs/cgroup/unified beside the v1 controllers (hybrid), or v1's name=systemd (legacy).
CGROUP_HIERARCHIES = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/systemd"))


def paths(host: state.LabHost) -> dict[str, Path]:
    directory = host.directory
    return {name: directory / name for name in ("upper", "work", "root", "disks", "console.log", "supervisor.pid",
                                                "boot-delay")}


def boot_delay(host: state.LabHost) -> float:
    """The seconds the host stays off when it reboots."""
    try:
        return float(paths(host)["boot-delay"].read_text())
    except (OSError, ValueError):
        return DEFAULT_BOOT_DELAY_SECONDS


def create(host: state.LabHost, lab: state.Lab, base: Path, repo: Path, mirrors: Mirrors, nvme_size_gib: int) -> None:
    """Lay out the host's root, disks and files; idempotent for a host that already exists."""
    where = paths(host)
    for name in ("upper", "work", "root", "disks"):
        where[name].mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mountpoint", "-q", str(where["root"])]).returncode != 0:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={base},upperdir={where['upper']},workdir={where['work']}", str(where["root"])],
                       check=True)
    hardware = host.hardware(nvme_size_gib)
    host.nvme_loops = [_attach_disk(where["disks"] / f"{disk['name']}.img", disk["size_gib"]) for disk in hardware["nvme"]]
    _write_host_files(where["root"], host, lab, hardware, mirrors, repo)
    _install_kernel_packages(where["root"], repo / KERNEL_PACKAGES_PATH)


def _install_kernel_packages(root: Path, packages: Path) -> None:
    """The kernel images a host starts with, as an installer leaves them: the running kernel with its
    flavour's metapackage, and an older one; their headers are for the deploy to install."""
    debs = [deb for deb in sorted(packages.glob("linux-image-*.deb"))
            if subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", deb.name.split("_")[0]],
                              capture_output=True).returncode != 0]
    if debs:
        subprocess.run(["dpkg", f"--root={root}", "-i", *map(str, debs)], check=True, capture_output=True)


def _attach_disk(image: Path, size_gib: int) -> str:
    """The loop device backing `image`: the one already attached, or a new one (after a controller restart)."""
    if not image.exists():
        with open(image, "wb") as sparse:
            sparse.truncate(size_gib * 1024**3)
    attached = subprocess.run(["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)],
                              capture_output=True, text=True).stdout.split()
    if attached:
        return attached[0]
    return subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                          text=True).stdout.strip()


def _write_host_files(root: Path, host: state.LabHost, lab: state.Lab, hardware: dict, mirrors: Mirrors,
                      repo: Path) -> None:
    def write(relative: str, content: str | bytes, mode: int = 0o644) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)
        path.chmod(mode)

    shutil.rmtree(root / SIM_ON_HOST, ignore_errors=True)
    for relative, file in host_files(host, lab, hardware, mirrors).items():
        write(relative, file.content, file.mode)
    (root / "root/.ssh").chmod(0o700)
    if not list((root / "etc/ssh").glob("ssh_host_*_key")):
        for relative, file in new_ssh_host_keys().items():
            write(relative, file.content, file.mode)
    # Container-only: the boot layer's stand-ins for what the controller's shared kernel cannot do per host.
    write("etc/machine-id", hashlib.md5(f"k3ops-lab/{host.name}".encode()).hexdigest() + "\n", 0o444)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    # The lab's kernel packages stand in for the distribution's own: a source from the start, like Debian's.
    write(KERNEL_KEYRING, (repo / SIGNING_KEY_PATHS[0]).read_text())
    write("etc/apt/sources.list.d/k3ops-lab-kernel.sources",
          f"Types: deb\nURIs: {vendor_repo_url()}/{KERNEL_PACKAGES_PATH}/\nSuites: /\nSigned-By: /{KERNEL_KEYRING}\n")
    # The driver packages' dkms is the lab's stand-in, whatever version Debian has.
    write("etc/apt/preferences.d/k3ops-lab-kernel", f"Package: dkms\nPin: version {STAND_IN_DKMS_VERSION}\n"
          "Pin-Priority: 1001\n")
    write(MODPROBE_ON_HOST, MODPROBE, 0o755)
    write("etc/systemd/system/docker.service.d/k3ops-lab.conf", DOCKERD_DROP_IN)
    write("etc/systemd/system/systemd-timesyncd.service.d/k3ops-lab.conf", TIMESYNCD_DROP_IN)
    for unit, (target, content) in LAB_UNITS.items():
        write(f"etc/systemd/system/{unit}", content)
        wants = root / f"etc/systemd/system/{target}.wants"
        wants.mkdir(parents=True, exist_ok=True)
        if not (wants / unit).is_symlink():
            (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")


def nspawn_command(host: state.LabHost) -> list[str]:
    """The container's command line, in a time namespace whose boot clock starts now.

    So /proc/uptime inside the host counts from this boot, as on a real machine: pyinfra's
    `server.reboot` and other tools that watch uptime see the reboot.
    """
    hardware = host.hardware()
    controller_uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    command = [
        "unshare", "--time", "--fork", f"--boottime=-{max(controller_uptime - 1, 0)}",
        "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--quiet",
        f"--directory={paths(host)['root']}", f"--machine={host.name}",
        f"--network-namespace-path={NETNS_PATH}/{host.netns}",
    ]
    command += [f"--tmpfs={mount}" for mount in SIMULATED_SYSFS]
    command += [f"--bind={loop}:/dev/{disk['name']}" for loop, disk in zip(host.nvme_loops, hardware["nvme"], strict=True)]
    return command


def host_cgroup(host: state.LabHost) -> Path:
    """The host's own cgroup, which its supervisor and container run in.

    nspawn (--keep-unit) puts its container in `<its cgroup>/payload`. Were every host's nspawn in one
    cgroup, all hosts' systemd would manage one cgroup tree: a unit ending on one host removes the
    cgroup that the same unit, starting on another, was just given, and that start fails with
    219/CGROUP ("Failed to attach to cgroup").
    """
    hierarchy = next(mount for mount in CGROUP_HIERARCHIES if (mount / "cgroup.procs").exists())
    return hierarchy / state.CGROUP / host.name


def remove_cgroups() -> None:
    """Remove the cgroups the lab's hosts ran in, deepest first (a hybrid controller has them twice)."""
    for hierarchy in CGROUP_HIERARCHIES:
        for directory, _, _ in os.walk(hierarchy / state.CGROUP, topdown=False):
            with contextlib.suppress(OSError):  # still in use: a process that outlived `lab down`
                os.rmdir(directory)


def supervise(host: state.LabHost) -> int:
    """Run the host's container until it shuts down; restart it when it reboots."""
    cgroup = host_cgroup(host)
    cgroup.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
    log = open(paths(host)["console.log"], "ab")
    stopping = False
    child: subprocess.Popen | None = None

    def stop(_signum, _frame):
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            # unshare ignores SIGTERM while it waits; nspawn, in its process group, powers the host off.
            os.killpg(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    while True:
        child = subprocess.Popen(nspawn_command(host), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 process_group=0)
        status = child.wait()
        if stopping or status != REBOOT_EXIT_STATUS:
            return 0 if status in (0, REBOOT_EXIT_STATUS) else status
        delay = boot_delay(host)
        log.write(f"\n=== k3ops lab: {host.name} rebooted; firmware for {delay:g} s, then starting it again ===\n"
                  .encode())
        log.flush()
        ends = time.monotonic() + delay
        while not stopping and time.monotonic() < ends:
            time.sleep(min(0.2, max(ends - time.monotonic(), 0)))
        if stopping:
            return 0


def start(host: state.LabHost) -> None:
    """Start the host's supervisor in its own session, so it outlives this command."""
    if supervisor_pid(host):
        return
    process = subprocess.Popen(
        [sys.executable, "-m", "k3ops_lab.supervisor", host.name],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(paths(host)["console.log"], "ab"),
        start_new_session=True, env={**os.environ, "PYTHONPATH": supervisor_path()},
    )
    paths(host)["supervisor.pid"].write_text(f"{process.pid}\n")


def supervisor_path() -> str:
    """The supervisor's PYTHONPATH: where this lab and the k3ops it imports were loaded from (two
    distributions, in two source trees when installed from a checkout), however this process found them."""
    return os.pathsep.join(dict.fromkeys((str(Path(__file__).parents[1]), str(Path(k3ops.__file__).parents[1]))))


def supervisor_pid(host: state.LabHost) -> int | None:
    return pid_from_file(paths(host)["supervisor.pid"], b"k3ops_lab.supervisor", host.name.encode())


def running(host: state.LabHost) -> bool:
    pid = supervisor_pid(host)
    if pid is None:
        return False
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return children.exists() and bool(children.read_text().split())


def stop(host: state.LabHost, timeout: float = 30.0) -> None:
    """Shut the container down cleanly, then forcibly if it hangs."""
    terminate(lambda: supervisor_pid(host), timeout, lambda pid: os.killpg(pid, signal.SIGKILL))


def destroy(host: state.LabHost) -> None:
    """Remove everything the host holds on the controller: mount, loop devices, files."""
    where = paths(host)
    if where["root"].exists() and subprocess.run(["mountpoint", "-q", str(where["root"])]).returncode == 0:
        subprocess.run(["umount", "--lazy", str(where["root"])], check=True)
    for loop in host.nvme_loops:
        subprocess.run(["losetup", "-d", loop], capture_output=True)
    remove_strays(host.directory)


def remove_strays(directory: Path) -> None:
    """Kill, unmount and detach whatever still runs from or is backed by `directory`, then delete it.

    Covers what a crashed `lab up` or a lost state file leaves behind, so `lab down` always cleans up.
    """
    marker = f"--directory={directory}/".encode()
    kill_matching(lambda cmdline: marker in cmdline)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", "--lazy", mount], capture_output=True)
    listing = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[1].startswith(f"{directory}/"):
            subprocess.run(["losetup", "-d", fields[0]], capture_output=True)
    shutil.rmtree(directory, ignore_errors=True)

