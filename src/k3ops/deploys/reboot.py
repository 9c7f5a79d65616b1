"""Reboots: only when the host state needs one, only where the policy allows, never the controller."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand
from pyinfra.operations import python, server

from ..spec.host import GpuHostSpec
from ..ssh_liveness import watch_connection

LOCAL_NAMES = {"localhost", "@local"}


def is_controller(target=host) -> bool:
    """The machine running pyinfra: never rebooted by a deploy."""
    if target.name in LOCAL_NAMES or target.name.startswith("@local"):
        return True
    address = target.data.get("ssh_hostname") or target.name
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address in LOCAL_NAMES


def reboot_if_needed(spec: GpuHostSpec, reason: str, needed: Callable[[], bool], verify: str) -> Callable[[], bool]:
    """Reboot when `needed()` (checked at run time) and allowed, then run `verify` on the new boot.

    Returns a check for the operations that need the new boot: true when the host runs what is
    installed, false when a reboot was needed but not allowed (those operations are skipped).
    """
    if spec.reboot_policy != "allowed" or is_controller():
        why = "the controller is never rebooted" if is_controller() else "reboot_policy is 'never'"
        server.shell(name=f"Reboot needed to {reason}, but {why}: reboot this host yourself",
                     commands=[StringCommand("echo", QuoteString(f"k3ops: reboot needed to {reason}"), ">&2")],
                     _if=needed)
        return lambda: not needed()
    rebooted = server.reboot(name=f"Reboot to {reason}", delay=5, reboot_timeout=spec.reboot_timeout_seconds,
                             _if=needed)
    rebooted_host = host._get_module()  # the host itself, for the callback that runs after this prepare step
    python.call(name="Keepalives and time limits on the connection after the reboot",
                function=lambda: watch_connection(rebooted_host), _if=rebooted.did_change)
    server.shell(name="Verify the new boot runs what is installed",
                 commands=[StringCommand(verify, "||", "{", "echo", QuoteString(
                     f"k3ops: after the reboot the host does not run what is installed ({reason})"), ">&2;", "exit", "1;",
                     "}")],
                 _if=rebooted.did_change)
    return lambda: True
