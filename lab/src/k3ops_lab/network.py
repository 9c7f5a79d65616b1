"""The lab network: one bridge on the controller, one network namespace per host.

Hosts reach each other and the controller's address on the bridge (container hosts each other over IPv6
too, in the lab's own unique local prefix); they get no default route,
and the controller does not forward, so nothing leaves the lab's subnet.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import state

NETNS_DIR = Path("/run/netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _veth(host: state.LabHost) -> str:
    return state.VETH_PREFIX + host.name


def tap_name(host: state.LabHost) -> str:
    """A VM host's NIC on the controller's side: QEMU's tap device, a port of the lab bridge."""
    return state.TAP_PREFIX + host.name


def create_bridge() -> None:
    if _ip("link", "show", state.BRIDGE, check=False).returncode != 0:
        _ip("link", "add", state.BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{state.CONTROLLER_ADDRESS}/{state.PREFIX_LENGTH}", "dev", state.BRIDGE)
    _ip("link", "set", state.BRIDGE, "up")


def create_host_namespace(host: state.LabHost) -> None:
    """A namespace whose eth0 sits on the lab bridge with the host's fixed address."""
    if not (NETNS_DIR / host.netns).exists():
        _ip("netns", "add", host.netns)
    if _ip("link", "show", _veth(host), check=False).returncode != 0:
        _ip("link", "add", _veth(host), "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/{state.PREFIX_LENGTH}", "dev", "eth0")
        _ip("-n", host.netns, "-6", "addr", "add", f"{host.address6}/{state.PREFIX6_LENGTH}", "dev", "eth0", "nodad")
    _ip("link", "set", _veth(host), "master", state.BRIDGE, "up")
    _ip("-n", host.netns, "link", "set", "lo", "up")
    _ip("-n", host.netns, "link", "set", "eth0", "up")


def create_tap(host: state.LabHost) -> None:
    """A tap device on the lab bridge for a VM host; the VM's own kernel configures its side."""
    if _ip("link", "show", tap_name(host), check=False).returncode != 0:
        _ip("tuntap", "add", "dev", tap_name(host), "mode", "tap")
    _ip("link", "set", tap_name(host), "master", state.BRIDGE, "up")


def delete_tap(name: str) -> None:
    _ip("link", "del", state.TAP_PREFIX + name, check=False)


def lab_taps() -> list[str]:
    """Host names of every lab tap device present."""
    links = _ip("-o", "link", "show", check=False).stdout.splitlines()
    names = [line.split(":")[1].strip().split("@")[0] for line in links if line.count(":") >= 2]
    return sorted(name[len(state.TAP_PREFIX):] for name in names if name.startswith(state.TAP_PREFIX))


def set_link(host: state.LabHost, up: bool) -> None:
    """Take a host's cable out (or put it back): its bridge port goes down, the host keeps running unaware,
    as when a switch port or NIC dies under a live SSH session."""
    port = tap_name(host) if host.backend == "vm" else _veth(host)
    _ip("link", "set", port, "up" if up else "down")


def delete_host_namespace(name: str) -> None:
    _ip("link", "del", state.VETH_PREFIX + name, check=False)
    _ip("netns", "del", state.NETNS_PREFIX + name, check=False)


def lab_namespaces() -> list[str]:
    """Host names of every lab namespace present, whether or not the state file knows them."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name[len(state.NETNS_PREFIX):] for p in NETNS_DIR.iterdir() if p.name.startswith(state.NETNS_PREFIX))


def delete_bridge() -> None:
    _ip("link", "del", state.BRIDGE, check=False)
