"""Plain SSH sessions to inventory hosts outside a deploy (status, verify, rollback, chat), with paramiko.

The connection data is the inventory's own (k3ops.inventory.SshTarget), so these commands reach
exactly the hosts `pyinfra INVENTORY ...` would. Not fabric: loading an inventory imports pyinfra's
CLI, which monkey-patches the process for gevent, and fabric's runner then hangs (seen: `k3ops model
status` never returned); paramiko alone works under the patch.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .facts.reader import FactError, read_fact
from .inventory import SshTarget, targets



class CommandFailed(RuntimeError):
    pass


def as_root(command: str) -> str:
    """Run a command as root whether the SSH user is root or may sudo without a password."""
    return f'if [ "$(id -u)" = 0 ]; then {command}; else sudo -n sh -c {shlex.quote(command)}; fi'


class RemoteHost:
    """One inventory host over an open SSH session: run commands and ask facts, as root."""

    command_timeout: float | None = None  # a command silent for this long raises TimeoutError (None: waits)

    def __init__(self, target: SshTarget, client):
        self.name, self.data, self._client = target.name, target.data, client

    def run(self, command: str) -> tuple[bool, str, str]:
        status, out, err = self.run_status(command)
        return status == 0, out, err

    def run_status(self, command: str) -> tuple[int, str, str]:
        """The command's exit status, stdout and stderr."""
        _, stdout, stderr = self._client.exec_command(as_root(command), timeout=self.command_timeout)
        out, err = stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), out, err

    def close(self) -> None:
        self._client.close()

    def check_output(self, command: str) -> str:
        ok, out, err = self.run(command)
        if not ok:
            raise CommandFailed(err.strip() or out.strip() or "failed")
        return out

    def get_fact(self, fact_class, **arguments):
        return read_fact(self.run, fact_class, **arguments)


@dataclass
class HostResult:
    """What one host answered (`value`), or why it could not (`error`)."""

    host: str
    data: dict
    value: Any = None
    error: str | None = None


def on_hosts(inventory_path: str, selected: Callable[[dict], bool],
             action: Callable[[RemoteHost], Any]) -> list[HostResult]:
    """Run `action` on every host whose data is `selected`, all at once, in inventory order."""
    return on_targets([target for target in targets(inventory_path) if selected(target.data)], action)


def on_targets(chosen: list[SshTarget], action: Callable[[RemoteHost], Any]) -> list[HostResult]:
    """Run `action` on each of these hosts, all at once, in their order; a host that cannot be reached or
    answered is a HostResult with its error."""
    import paramiko

    def run(target: SshTarget) -> HostResult:
        client = None
        try:
            client = target.connect()
            return HostResult(target.name, target.data, value=action(RemoteHost(target, client)))
        except (OSError, paramiko.SSHException) as error:  # unreachable: reported with the others
            return HostResult(target.name, target.data, error=f"cannot connect: {error}")
        except (CommandFailed, FactError) as error:
            return HostResult(target.name, target.data, error=str(error))
        finally:
            if client is not None:
                client.close()

    with ThreadPoolExecutor(max_workers=max(len(chosen), 1)) as pool:
        return list(pool.map(run, chosen))
