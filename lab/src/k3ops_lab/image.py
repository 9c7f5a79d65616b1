"""The lab's Debian 12 base image: built once with debootstrap and cached outside the checkout."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from . import cache, state
from .debian import SUITE, Mirrors

# What every lab host has before any deploy: a booting systemd, sshd, and the tools that real
# validation suites call (lspci, dmidecode) reading the simulated sysfs layer.
BASE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "iputils-ping",
    "pciutils", "dmidecode", "kmod", "xfsprogs", "ca-certificates", "gnupg", "curl", "procps",
    "util-linux", "apt-utils", "less", "rsync",
)
BOOTS_WITH = ("lib/systemd/systemd", "usr/sbin/sshd")  # what a host runs first: systemd-nspawn --boot, then ssh


def base_image(mirrors: Mirrors, log=print) -> Path:
    """The cached base image for these packages and mirror, built when missing or broken."""
    key = hashlib.sha256(f"{SUITE} {mirrors.archive} {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    image = state.CACHE_DIR / "images" / f"debian-{SUITE}-{key}"
    return cache.entry(image, f"base image ({SUITE} from {mirrors.archive}, with debootstrap)",
                       lambda tree: _debootstrap(tree, mirrors), check, log)


def check(image: Path) -> None:
    """Every base package fully installed, the host's first programs there, and no host keys to share."""
    status = subprocess.run(["dpkg-query", f"--admindir={image}/var/lib/dpkg", "-W",
                             "-f=${db:Status-Abbrev} ${Package}\n", *BASE_PACKAGES],
                            check=True, capture_output=True, text=True).stdout
    problems = [f"{package} is not fully installed ({flags})" for flags, package in map(str.split, status.splitlines())
                if flags != "ii"]
    problems += [f"/{path} is missing" for path in BOOTS_WITH if not (image / path).is_file()]
    problems += [f"it holds host key /etc/ssh/{key.name}" for key in sorted((image / "etc" / "ssh").glob("ssh_host_*"))]
    if problems:
        raise RuntimeError(f"{image}: {'; '.join(problems)}")


def _debootstrap(tree: Path, mirrors: Mirrors) -> None:
    subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(tree),
         mirrors.archive],
        check=True, capture_output=True, text=True,  # its I: and E: lines are on stdout
    )
    # Host keys are made per host at first boot, not shared from the image.
    for key_file in (tree / "etc" / "ssh").glob("ssh_host_*"):
        key_file.unlink()
    (tree / "etc" / "machine-id").write_text("")
    subprocess.run(["chroot", str(tree), "apt-get", "clean"], check=True, capture_output=True, text=True)
