"""Bringing the lab up and down, and reporting on it: the verbs behind `k3ops lab`."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from . import hosts, hub, image, llama_server, network, services, state, vendor_repo, wheelhouse
from .debian import controller_mirrors
from .profiles import DEFAULT_PROFILE, get_profile

REQUIRED_COMMANDS = ("systemd-nspawn", "debootstrap", "apt-cacher-ng", "ip", "losetup", "dpkg-deb",
                     "apt-ftparchive", "gpg", "ssh", "ssh-keygen", "git")
BOOT_TIMEOUT_SECONDS = 120
DEFAULT_NVME_GIB = 8


class LabError(RuntimeError):
    """A lab operation that cannot go on, with what to do about it."""


def up(count: int, profiles: list[str], nvme_size_gib: int = DEFAULT_NVME_GIB, log=print) -> state.Lab:
    """Start a lab of `count` hosts (profiles in order, the rest the default); reuse a running one."""
    missing = [command for command in REQUIRED_COMMANDS if shutil.which(command) is None]
    if missing:
        raise LabError(f"missing commands: {', '.join(missing)} (install them, e.g. with the README's test command)")
    if len(profiles) > count:
        raise LabError(f"{len(profiles)} profiles given for {count} hosts; pass --hosts {len(profiles)} or fewer profiles")
    for name in profiles:
        get_profile(name)
    wanted = [profiles[i] if i < len(profiles) else DEFAULT_PROFILE for i in range(count)]
    existing = state.load()
    if existing is not None:
        have = [host.profile for host in existing.hosts]
        if have != wanted:
            raise LabError(f"a lab with profiles {have} is already up; run `k3ops lab down` first")
        lab = existing
    else:
        lab = state.Lab(hosts=[state.LabHost(name=state.host_name(i), profile=profile, address=state.host_address(i))
                               for i, profile in enumerate(wanted)])
    mirrors = controller_mirrors()
    _ensure_ssh_key()
    _ensure_api_key()
    base = image.base_image(mirrors, log=log)
    repo = vendor_repo.build(log=log)
    wheelhouse.publish(wheelhouse.build(log=log), repo)
    llama_server.publish(llama_server.build(log=log), repo)
    hub.build(log=log)
    network.create_bridge()
    services.start_apt_proxy()
    services.start_vendor_repo(repo)
    services.wait_until_listening()
    hub.start()
    services.prime_apt_proxy(mirrors.release_files())
    for host in lab.hosts:
        network.create_host_namespace(host)
        hosts.create(host, lab, base, repo, mirrors, nvme_size_gib)
        state.save(lab)
        hosts.start(host)
    with ThreadPoolExecutor(max_workers=len(lab.hosts)) as pool:
        list(pool.map(wait_for_ssh, lab.hosts))
    return lab


def wait_for_ssh(host: state.LabHost, timeout: float = BOOT_TIMEOUT_SECONDS) -> None:
    """Wait until the host's sshd accepts the lab key and systemd has finished booting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host.address, 22), timeout=1).close()
            if ssh(host, ["systemctl", "is-system-running", "--wait"], capture=True).returncode in (0, 1):
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise LabError(f"{host.name} did not come up within {timeout:.0f}s; see {hosts.paths(host)['console.log']}")


REBOOT_MARKER = "/run/k3ops-lab-before-reboot"  # gone once the host has booted again (/run starts empty)


def reboot(host: state.LabHost, timeout: float = BOOT_TIMEOUT_SECONDS) -> None:
    """Reboot a host from inside and wait for its new boot to finish."""
    ssh(host, [f"touch {REBOOT_MARKER} && systemctl reboot"], capture=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = ssh(host, [f"test ! -e {REBOOT_MARKER} && systemctl is-system-running --wait"], capture=True)
        if probe.returncode == 0 or probe.stdout.strip() == "degraded":
            return
        time.sleep(0.5)
    raise LabError(f"{host.name} did not come back within {timeout:.0f}s; see {hosts.paths(host)['console.log']}")


def ssh_command(host: state.LabHost, command: list[str]) -> list[str]:
    return ["ssh", "-i", str(state.ssh_key()), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            f"root@{host.address}", *command]


def ssh(host: state.LabHost, command: list[str], capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(ssh_command(host, command), capture_output=capture, text=True, stdin=subprocess.DEVNULL)


def status() -> list[dict]:
    lab = state.load()
    if lab is None:
        return []
    return [{"name": host.name, "profile": host.profile, "address": host.address,
             "state": "running" if hosts.container_running(host) else "stopped"} for host in lab.hosts]


def down(log=print) -> None:
    """Stop and remove everything the lab made; safe to run when nothing is up."""
    lab = state.load()
    known = lab.hosts if lab else []
    with ThreadPoolExecutor(max_workers=max(len(known), 1)) as pool:
        list(pool.map(hosts.stop, known))
    for host in known:
        hosts.destroy(host)
    services.stop_all()
    hosts.remove_strays(state.STATE_DIR)
    hosts.remove_cgroups()
    for name in network.lab_namespaces():
        network.delete_host_namespace(name)
    network.delete_bridge()
    if known:
        log(f"lab down: removed {len(known)} hosts")


def _ensure_api_key() -> None:
    """The key the lab's engines require (they listen on the lab network, not only on loopback)."""
    key = state.api_key()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key.touch(mode=0o600)
        key.write_text(secrets.token_urlsafe(32) + "\n")


def _ensure_ssh_key() -> None:
    key = state.ssh_key()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3ops-lab", "-f", str(key)], check=True)
