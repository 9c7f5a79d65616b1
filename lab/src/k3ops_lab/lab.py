"""Bringing the lab up and down, and reporting on it: the verbs behind `k3ops lab`."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import (container, hub, image, llama_server, network, registry, services, standin_image, state, vendor_repo,
               vm, vm_image, wheelhouse)
from .debian import controller_mirrors
from .profiles import DEFAULT_PROFILE, get_profile

REQUIRED_COMMANDS = ("systemd-nspawn", "debootstrap", "apt-cacher-ng", "ip", "losetup", "dpkg-deb",
                     "apt-ftparchive", "gpg", "ssh", "ssh-keygen", "git", "docker-registry", "openssl")
VM_COMMANDS = ("qemu-system-x86_64", "qemu-img", "sfdisk", "mkfs.ext4")
BACKENDS = {"container": container, "vm": vm}  # what runs a host: systemd-nspawn, or QEMU with its own kernel
DEFAULT_BACKEND = "container"
DEFAULT_NVME_GIB = 8


class LabError(RuntimeError):
    """A lab operation that cannot go on, with what to do about it."""


def up(count: int, profiles: list[str], nvme_size_gib: int = DEFAULT_NVME_GIB, backends: list[str] | None = None,
       nvme_devices: int | None = None, log=print) -> state.Lab:
    """Start a lab of `count` hosts (profiles in order, the rest the default; one backend for all, or one
    per host); reuse a running one with the same hosts."""
    wanted = _wanted_hosts(count, profiles, backends or [], nvme_devices)
    with_vm = any(host.backend == "vm" for host in wanted)
    missing = [command for command in REQUIRED_COMMANDS + (VM_COMMANDS if with_vm else ()) if shutil.which(command) is None]
    if missing:
        raise LabError(f"missing commands: {', '.join(missing)} (install them, e.g. with the README's test command)")
    existing = state.load()
    if existing is not None:
        have, want = [_shape(host) for host in existing.hosts], [_shape(host) for host in wanted]
        if have != want:
            raise LabError(f"a lab with hosts {have} is already up; run `k3ops lab down` first")
        lab = existing
    else:
        lab = state.Lab(hosts=wanted)
    mirrors = controller_mirrors()
    _ensure_ssh_key()
    _ensure_api_key()
    registry.ensure_certificates()
    base = image.base_image(mirrors, log=log)
    disk_image = vm_image.vm_image(base, mirrors, log=log) if with_vm else None
    repo = vendor_repo.build(log=log)
    wheelhouse.publish(wheelhouse.build(log=log), repo)
    llama_server.publish(llama_server.build(log=log), repo)
    hub.build(log=log)
    standins = standin_image.build(base, log=log)
    network.create_bridge()
    services.start_apt_proxy()
    services.start_vendor_repo(repo)
    services.wait_until_listening()
    hub.start()
    registry.start()
    registry.push(standins)
    services.prime_apt_proxy(mirrors.release_files())
    for host in lab.hosts:
        if host.backend == "vm":
            network.create_tap(host)
            vm.create(host, lab, disk_image, mirrors, nvme_size_gib)
            state.save(lab)
            vm.start(host, disk_image)
        else:
            network.create_host_namespace(host)
            container.create(host, lab, base, repo, mirrors, nvme_size_gib)
            state.save(lab)
            container.start(host)
    with ThreadPoolExecutor(max_workers=len(lab.hosts)) as pool:
        list(pool.map(wait_for_ssh, lab.hosts))
    return lab


def _wanted_hosts(count: int, profiles: list[str], backends: list[str], nvme_devices: int | None) -> list[state.LabHost]:
    """The hosts asked for, or a LabError naming the flag that cannot be met."""
    if len(profiles) > count:
        raise LabError(f"{len(profiles)} profiles given for {count} hosts; pass --hosts {len(profiles)} or fewer profiles")
    for name in profiles:
        get_profile(name)
    if len(backends) not in (0, 1, count):
        raise LabError(f"{len(backends)} backends given for {count} hosts; give one for every host, or one per host")
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise LabError(f"unknown backend {', '.join(unknown)}; backends: {', '.join(BACKENDS)}")
    if nvme_devices is not None and nvme_devices < 1:
        raise LabError("--nvme-devices must be at least 1")
    hosts = []
    for index in range(count):
        backend = backends[index if len(backends) == count else 0] if backends else DEFAULT_BACKEND
        if backend == "container" and (nvme_devices or 1) > 1:
            raise LabError(f"{state.host_name(index)}: --nvme-devices {nvme_devices} needs the vm backend: a RAID0 of them "
                           "needs the kernel's md driver, and a container host shares the controller's kernel")
        hosts.append(state.LabHost(name=state.host_name(index), profile=profiles[index] if index < len(profiles)
                                   else DEFAULT_PROFILE, address=state.host_address(index), backend=backend,
                                   nvme_devices=nvme_devices))
    return hosts


def _shape(host: state.LabHost) -> str:
    """What makes a host this host for `lab up`'s reuse: its profile, backend and NVMe devices."""
    return f"{host.profile}/{host.backend}" + (f"/{host.nvme_devices}nvme" if host.nvme_devices else "")


def build(with_vm: bool = False, log=print) -> None:
    """Build (or check) every cache entry a lab starts from, and start nothing: a machine's lab made ready
    ahead of `lab up`. In the opposite order to `up`'s, so that the two run side by side (the test command
    does) build different entries at once; an entry's lock makes the later of the two reuse it."""
    mirrors = controller_mirrors()
    llama_server.build(log=log)
    hub.build(log=log)
    wheelhouse.build(log=log)
    vendor_repo.build(log=log)
    base = image.base_image(mirrors, log=log)
    standin_image.build(base, log=log)
    if with_vm:
        vm_image.vm_image(base, mirrors, log=log)


def wait_for_ssh(host: state.LabHost) -> None:
    """Wait until the host's sshd accepts the lab key and systemd has finished booting."""
    timeout = BACKENDS[host.backend].BOOT_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host.address, 22), timeout=1).close()
            if ssh(host, ["systemctl", "is-system-running", "--wait"], capture=True).returncode in (0, 1):
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise LabError(f"{host.name} did not come up within {timeout:.0f}s; see {console_log(host)}")


REBOOT_MARKER = "/run/k3ops-lab-before-reboot"  # gone once the host has booted again (/run starts empty)


def console_log(host: state.LabHost) -> Path:
    return BACKENDS[host.backend].paths(host)["console.log"]


def reboot(host: state.LabHost) -> None:
    """Reboot a host from inside and wait for its new boot to finish."""
    timeout = BACKENDS[host.backend].BOOT_TIMEOUT_SECONDS
    ssh(host, [f"touch {REBOOT_MARKER} && systemctl reboot"], capture=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = ssh(host, [f"test ! -e {REBOOT_MARKER} && systemctl is-system-running --wait"], capture=True)
        if probe.returncode == 0 or probe.stdout.strip() == "degraded":
            return
        time.sleep(0.5)
    raise LabError(f"{host.name} did not come back within {timeout:.0f}s; see {console_log(host)}")


def ssh(host: state.LabHost, command: list[str], capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(state.ssh_command(host, command), capture_output=capture, text=True,
                          stdin=subprocess.DEVNULL)


def status() -> list[dict]:
    lab = state.load()
    if lab is None:
        return []
    return [{"name": host.name, "profile": host.profile, "backend": host.backend, "address": host.address,
             "state": "running" if BACKENDS[host.backend].running(host) else "stopped"} for host in lab.hosts]


def down(log=print) -> None:
    """Stop and remove everything the lab made; safe to run when nothing is up."""
    lab = state.load()
    known = lab.hosts if lab else []
    with ThreadPoolExecutor(max_workers=max(len(known), 1)) as pool:
        list(pool.map(lambda host: BACKENDS[host.backend].stop(host), known))
    for host in known:
        BACKENDS[host.backend].destroy(host)
    services.stop_all()
    vm.kill_strays(state.STATE_DIR)
    container.remove_strays(state.STATE_DIR)
    container.remove_cgroups()
    for name in network.lab_namespaces():
        network.delete_host_namespace(name)
    for name in network.lab_taps():
        network.delete_tap(name)
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
