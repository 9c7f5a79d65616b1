"""Reboots: only when the host state needs one, only where the policy allows, never the controller."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from functools import cache
from pathlib import Path

from pyinfra import host
from pyinfra.api import DeployError, QuoteString, StringCommand
from pyinfra.facts.systemd import SystemdStatus
from pyinfra.operations import python, server

from ..onhost.layout import ENGINE_UNIT
from ..settings.host import GpuHostSpec
from ..ssh_liveness import watch_connection

LOCAL_ROUTE = ["/32", "host", "LOCAL"]  # /proc/net/fib_trie's line under each address of this machine's


def refuse_release_change_while_serving(running: str | None, wanted: str, label: str, setting: str, verb: str) -> None:
    """A driver release change reboots the host, and a plain deploy reboots every host it runs on at once: on a host
    whose engine serves, it goes through `k3ops upgrade VERB`, which drains a group at a time first."""
    if running is None or running == wanted or not host.get_fact(SystemdStatus).get(ENGINE_UNIT):
        return
    raise DeployError(
        f"{host.name}: runs {label} {running} and serves ({ENGINE_UNIT} is running); this deploy would move it "
        f"to {wanted} ({setting}) and reboot it together with every other host it runs on. Roll a serving fleet "
        f"a group at a time: `k3ops upgrade {verb} INVENTORY --to {wanted}`; or, after such a rollout, set "
        f"{setting} = '{running}' in the inventory")


def is_controller(target=host) -> bool:
    """The machine running pyinfra, by the address pyinfra connects to (ssh_hostname, else the inventory name)
    or by an inventory name that is one of its own: never rebooted by a deploy. Only the address is looked up,
    as the connection would look it up."""
    if target.name.startswith("@local"):
        return True
    return answers_here(str(target.data.get("ssh_hostname") or target.name)) or answers_here(target.name, False)


@cache
def answers_here(name: str, look_up: bool = True) -> bool:
    """Whether a name or address reaches this machine: localhost (any case, a trailing dot, *.localhost), its
    host name and FQDN, loopback, the unspecified address (0.0.0.0, ::, which connect here), an IPv4 address in
    IPv6 form, or an address of its own interfaces; `look_up`: also what the name resolves to."""
    text = name.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    if text == "localhost" or text.endswith(".localhost") or text in own_names():
        return True
    try:
        addresses = {ipaddress.ip_address(text.split("%", 1)[0])}  # an IPv6 zone id does not change the address
    except ValueError:
        addresses = resolved(text, look_up)  # also the forms only inet_aton reads: 127.1, 0x7f000001, 0
    return any(is_own(address) for address in addresses)


def is_own(address) -> bool:
    """Loopback, unspecified or this machine's own, an IPv4 address in IPv6 form read as itself."""
    address = getattr(address, "ipv4_mapped", None) or address
    return address.is_loopback or address.is_unspecified or address in own_addresses()


@cache
def own_names() -> frozenset[str]:
    """This machine's host name and FQDN, each also as its first label, lowercase."""
    names = {socket.gethostname(), socket.getfqdn()}
    return frozenset(name.lower().rstrip(".") for found in names for name in (found, found.split(".")[0]) if name)


@cache
def own_addresses() -> frozenset:
    """Every address of this machine's interfaces, as Linux lists them (none elsewhere: loopback and the host
    names still count), and what its host names resolve to."""
    found = set()
    try:
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        found |= {above.split()[-1] for above, line in zip(lines, lines[1:]) if line.split() == LOCAL_ROUTE}
    except OSError:
        pass
    try:
        found |= {str(ipaddress.IPv6Address(int(line.split()[0], 16)))
                  for line in Path("/proc/net/if_inet6").read_text().splitlines() if line.strip()}
    except OSError:
        pass
    return frozenset({ipaddress.ip_address(address) for address in found}
                     | {address for name in own_names() for address in resolved(name)})


def resolved(name: str, look_up: bool = True) -> set:
    """The addresses a name resolves to here (none when it does not), zone ids dropped; without `look_up`, only
    a numeric form is read, and nothing is asked of a resolver."""
    try:
        return {ipaddress.ip_address(found[4][0].split("%", 1)[0])
                for found in socket.getaddrinfo(name, None, flags=0 if look_up else socket.AI_NUMERICHOST)}
    except (OSError, ValueError):  # ValueError: a name no resolver takes (a NUL, a label too long for IDNA)
        return set()


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
