"""The VM hosts' disk image: the lab's base image with Debian's cloud kernel and GRUB, installed as an
installer leaves a machine, built once and cached.

The root filesystem is made from the tree (`mkfs.ext4 -d`, no loop mount), and GRUB is installed the
way an installer does it: by the image's own kernel, booted once in QEMU with the disk as /dev/vda
(`grub-install /dev/vda`, `update-grub`). From then on the disk boots by itself: firmware, GRUB's
boot sector, its config, the kernel the config names.

What the image adds to the base image's hosts is only what a host of its own needs to join the lab:
systemd-networkd for the address its seed disk gives it, and the seed service that reads that disk
at first boot (the hosts' own files: host_files.py).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import uuid
from pathlib import Path

from . import cache, state
from .debian import SUITE, Mirrors
from .host_files import HARDWARE_UNIT, HARDWARE_UNIT_NAME
from .qemu import Console, accelerator, qemu_command

KERNEL_PACKAGES = ("linux-image-cloud-amd64", "grub-pc", "initramfs-tools")
# The distribution's packages the deploys install on a GPU host, installed here at the controller's speed as a GPU
# host's image builder does, rather than by the deploys under TCG (they find them installed; their installation
# is what the container hosts test). A VM's time goes to what only it can show: the GPU driver's DKMS build against
# its kernel's headers, the initramfs and the md array across a reboot, the kernel's own log. Docker is left
# disabled for the deploy to start, so that a host without GPUs boots without it.
IMAGE_BUILDER_PACKAGES = ("linux-headers-cloud-amd64", "dkms", "mdadm", "docker.io", "apparmor", "openmpi-bin",
                          "python3-mpi4py", "libopenmpi3", "systemd-timesyncd", "mokutil", "python3-venv")
DISABLED_UNITS = ("docker.service", "docker.socket", "containerd.service")
# Nothing starts while the builder installs (invoke-rc.d's policy): no daemon runs in the builder's chroot.
NO_DAEMONS_POLICY = ("usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n")
# mdadm's own, written before mdadm is installed so that its postinst does not scan the builder's devices for
# arrays to record: a host's array is recorded by its deploy (storage.raid0_recorded).
MDADM_CONF = ("etc/mdadm/mdadm.conf", "# !NB! Run update-initramfs -u after updating this file.\nHOMEHOST <system>\n"
              "MAILADDR root\n\n# definitions of existing MD arrays\n")
DISK_GIB = 16  # sparse; the deploys' packages and a model cache's system part fit with room
ROOT_PARTITION_OFFSET = 1024 * 1024  # sector 2048, as fdisk places the first partition
ROOT_LABEL = "k3lab-root"
DISK_FILE = "disk.qcow2"
KERNEL_RELEASE_FILE = "kernel-release"
KERNEL_FILE = "vmlinuz"  # the image's kernel, beside it for the accelerator probe
INSTALL_BOOTLOADER = "usr/lib/k3ops-lab/install-bootloader"
BOOTLOADER_INSTALLED = "k3ops-lab: bootloader installed"
BOOTLOADER_TIMEOUT_SECONDS = 600
SEED_SERIAL = "k3lab-seed"
SEED_DEVICE = f"/dev/disk/by-id/virtio-{SEED_SERIAL}"
SEED_DEVICE_UNIT = "dev-disk-by\\x2did-virtio\\x2dk3lab\\x2dseed.device"  # SEED_DEVICE, as systemd names it
SEEDED = "var/lib/k3ops-lab/seeded"
# First boot only: the host's files from the tar the lab attached as a read-only disk, before its
# network, sshd and hardware layer start. A host's name is set by systemd before any unit: set it again.
SEED_UNIT = f"""[Unit]
Description=k3ops lab: this host's own files (name, keys, address, hardware) from the lab's seed disk
DefaultDependencies=no
Requires={SEED_DEVICE_UNIT}
After={SEED_DEVICE_UNIT} systemd-remount-fs.service
Before=sysinit.target systemd-networkd.service ssh.service {HARDWARE_UNIT_NAME}
ConditionPathExists=!/{SEEDED}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/tar --extract --same-permissions --same-owner --file={SEED_DEVICE} --directory=/
ExecStart=/bin/sh -c 'hostname "$(cat /etc/hostname)" && mkdir -p /{Path(SEEDED).parent} && touch /{SEEDED}'

[Install]
WantedBy=sysinit.target
"""
# Run as init by the image's kernel on its first, only boot in the builder (see module docstring).
INSTALL_BOOTLOADER_SCRIPT = f"""#!/bin/sh
mount -o remount,rw /
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
grub-install --target=i386-pc /dev/vda && update-grub && sync && echo "{BOOTLOADER_INSTALLED}"
echo o > /proc/sysrq-trigger
sleep 60
"""
# The serial console is the lab's console.log, with the kernel's messages (no "quiet"); no menu to wait at.
GRUB_SETTINGS = {"GRUB_TIMEOUT": "0", "GRUB_CMDLINE_LINUX": '"console=ttyS0,115200"', "GRUB_CMDLINE_LINUX_DEFAULT": '""', "GRUB_TERMINAL": "serial",
                 "GRUB_SERIAL_COMMAND": '"serial --unit=0 --speed=115200"'}
ENABLED_UNITS = {  # unit -> the target that wants it, as `systemctl enable` links them
    "k3ops-lab-seed.service": "sysinit.target",
    HARDWARE_UNIT_NAME: "sysinit.target",
    "systemd-networkd.service": "multi-user.target",
    "systemd-networkd.socket": "sockets.target",
    "systemd-networkd-wait-online.service": "network-online.target",
}
SYSTEM_UNITS = "/lib/systemd/system"
# The initramfs a deploy rebuilds (the driver's after blacklisting nouveau, the model cache's after recording
# its array) holds only the modules this machine needs to boot, as an installer may set it: with MODULES=most
# mkinitramfs runs modinfo on every module of the kernel, minutes under TCG. The image's own is built with "most".
INITRAMFS_CONF = ("etc/initramfs-tools/conf.d/k3ops-lab.conf", "MODULES=dep\n")


def vm_image(base: Path, mirrors: Mirrors, log=print) -> Path:
    """The cached image directory (DISK_FILE, KERNEL_RELEASE_FILE) made from `base`, by this module's steps,
    with the hardware unit it bakes in."""
    key = hashlib.sha256(base.name.encode() + Path(__file__).read_bytes() + HARDWARE_UNIT.encode()).hexdigest()[:12]
    return cache.entry(state.CACHE_DIR / "images" / f"vm-{SUITE}-{key}", f"VM disk image ({SUITE}, cloud kernel, GRUB)",
                       lambda directory: _build(directory, base, mirrors, log), check, log)


def check(directory: Path) -> None:
    """A qcow2 disk that qemu-img finds sound, and the kernel it boots named."""
    subprocess.run(["qemu-img", "check", "-q", str(directory / DISK_FILE)], check=True, capture_output=True, text=True)
    if not kernel_release(directory) or not (directory / KERNEL_FILE).is_file():
        raise RuntimeError(f"{directory}: no kernel recorded")


def kernel_release(directory: Path) -> str:
    path = directory / KERNEL_RELEASE_FILE
    return path.read_text().strip() if path.exists() else ""


def _build(directory: Path, base: Path, mirrors: Mirrors, log) -> None:
    tree = directory / "tree"
    subprocess.run(["cp", "-a", str(base), str(tree)], check=True)
    (tree / "etc/apt/sources.list").unlink(missing_ok=True)
    (tree / "etc/apt/sources.list.d/debian.sources").write_text(mirrors.sources())
    shutil.copy("/etc/resolv.conf", tree / "etc/resolv.conf")  # the builder's apt fetches from the controller
    (tree / MDADM_CONF[0]).parent.mkdir(parents=True, exist_ok=True)
    (tree / MDADM_CONF[0]).write_text(MDADM_CONF[1])
    policy = tree / NO_DAEMONS_POLICY[0]
    policy.write_text(NO_DAEMONS_POLICY[1])
    policy.chmod(0o755)
    _in_tree(tree, "echo 'grub-pc grub-pc/install_devices multiselect' | debconf-set-selections && "
                   "echo 'grub-pc grub-pc/install_devices_empty boolean true' | debconf-set-selections && "
                   "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                   f"{' '.join(KERNEL_PACKAGES + IMAGE_BUILDER_PACKAGES)} && apt-get clean && "
                   f"systemctl disable {' '.join(DISABLED_UNITS)}")
    policy.unlink()
    (tree / "etc/resolv.conf").write_text("")
    release = sorted(path.name.removeprefix("vmlinuz-") for path in (tree / "boot").glob("vmlinuz-*"))[-1]
    _configure(tree)
    root_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{directory.name}.k3ops-lab"))
    (tree / "etc/fstab").write_text(f"UUID={root_uuid} / ext4 errors=remount-ro 0 1\n")
    raw = directory / "disk.raw"
    with open(raw, "wb") as disk:
        disk.truncate(DISK_GIB * 1024**3)
    subprocess.run(["sfdisk", "--quiet", str(raw)], input=f"label: dos\nstart={ROOT_PARTITION_OFFSET // 512}, "
                   "type=83, bootable\n", check=True, capture_output=True, text=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-U", root_uuid, "-L", ROOT_LABEL, "-E", f"offset={ROOT_PARTITION_OFFSET}",
                    "-d", str(tree), str(raw), f"{(DISK_GIB * 1024**3 - ROOT_PARTITION_OFFSET) // 1024}k"],
                   check=True, capture_output=True, text=True)
    log(f"installing GRUB on the VM disk image from its own kernel ({release}), booted once")
    kernel = tree / f"boot/vmlinuz-{release}"
    console = Console(directory / "install-bootloader.log")
    command = qemu_command(
        name="k3ops-lab-image", accel=accelerator(kernel), disks=[f"file={raw},if=virtio,format=raw"], console=console,
        extra=["-no-reboot", "-kernel", str(kernel), "-initrd", str(tree / f"boot/initrd.img-{release}"),
               "-append", f"root=UUID={root_uuid} rw console=ttyS0 panic=-1 init=/{INSTALL_BOOTLOADER}"])
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=BOOTLOADER_TIMEOUT_SECONDS)
    if BOOTLOADER_INSTALLED not in console.text():
        raise RuntimeError(f"GRUB was not installed; the builder's console:\n{console.tail()}")
    shutil.copy(kernel, directory / KERNEL_FILE)
    shutil.rmtree(tree)
    subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(directory / DISK_FILE)], check=True,
                   capture_output=True, text=True)
    raw.unlink()
    (directory / KERNEL_RELEASE_FILE).write_text(release + "\n")


def _in_tree(tree: Path, script: str) -> None:
    """Run `script` chrooted in `tree` with /proc, /sys and /dev, in a mount namespace of its own (so the
    mounts end with it)."""
    mounts = (f"mount -t proc proc {tree}/proc && mount -t sysfs sys {tree}/sys && mount --rbind /dev {tree}/dev && "
              f"chroot {tree} /bin/sh -c \"$0\"")
    subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "--", "sh", "-c", mounts, script],
                   check=True, capture_output=True, text=True)


def _configure(tree: Path) -> None:
    """GRUB on the serial console, initramfs rebuilds for this machine, the lab's units enabled."""
    grub = tree / "etc/default/grub"
    lines = grub.read_text().splitlines()
    for variable, value in GRUB_SETTINGS.items():
        lines = [line for line in lines if not line.startswith(f"{variable}=")] + [f"{variable}={value}"]
    grub.write_text("\n".join(lines) + "\n")
    (tree / INITRAMFS_CONF[0]).write_text(INITRAMFS_CONF[1])
    units = tree / "etc/systemd/system"
    (units / "k3ops-lab-seed.service").write_text(SEED_UNIT)
    (units / HARDWARE_UNIT_NAME).write_text(HARDWARE_UNIT)
    for unit, target in ENABLED_UNITS.items():
        wants = units / f"{target}.wants"
        wants.mkdir(parents=True, exist_ok=True)
        source = f"/etc/systemd/system/{unit}" if (units / unit).exists() else f"{SYSTEM_UNITS}/{unit}"
        (wants / unit).unlink(missing_ok=True)
        (wants / unit).symlink_to(source)
    script = tree / INSTALL_BOOTLOADER
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(INSTALL_BOOTLOADER_SCRIPT)
    script.chmod(0o755)
