"""The lab's Debian 12 base image: built once with debootstrap and cached outside the checkout."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from . import state
from .debian import SUITE, Mirrors

# What every lab host has before any deploy: a booting systemd, sshd, and the tools that real
# validation suites call (lspci, dmidecode) reading the simulated sysfs layer.
BASE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "iputils-ping",
    "pciutils", "dmidecode", "kmod", "xfsprogs", "ca-certificates", "gnupg", "curl", "procps",
    "util-linux", "apt-utils", "less", "rsync",
)


def base_image(mirrors: Mirrors, log=print) -> Path:
    """Return the cached base image for these packages and mirror, building it if missing."""
    key = hashlib.sha256(f"{SUITE} {mirrors.archive} {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    image = state.CACHE_DIR / "images" / f"debian-{SUITE}-{key}"
    if image.is_dir():
        return image
    log(f"building the base image with debootstrap ({SUITE}, {mirrors.archive}); cached at {image}")
    partial = image.with_name(image.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(partial),
         mirrors.archive],
        check=True, stdout=subprocess.DEVNULL,
    )
    # Host keys are made per host at first boot, not shared from the image.
    for key_file in (partial / "etc" / "ssh").glob("ssh_host_*"):
        key_file.unlink()
    (partial / "etc" / "machine-id").write_text("")
    subprocess.run(["chroot", str(partial), "apt-get", "clean"], check=True)
    partial.rename(image)
    return image
