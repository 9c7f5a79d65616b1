"""Plain SSH sessions to inventory hosts outside a deploy (status, rollback), with paramiko.

The connection data is the inventory's own (ssh_hostname, ssh_user, ssh_port, ssh_key), so these
commands reach exactly the hosts `pyinfra INVENTORY ...` would. Not fabric: loading an inventory
imports pyinfra's CLI, which monkey-patches the process for gevent, and fabric's runner then hangs
(seen: `k3ops model status` never returned); paramiko alone works under the patch.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .inventory import load

CONNECT_TIMEOUT_SECONDS = 10


@dataclass
class Outcome:
    host: str
    data: dict
    ok: bool
    stdout: str
    stderr: str


def as_root(command: str) -> str:
    """Run a command as root whether the SSH user is root or may sudo without a password."""
    return f'if [ "$(id -u)" = 0 ]; then {command}; else sudo -n {command}; fi'


def run_on_hosts(inventory_path: str, command_for) -> list[Outcome]:
    """Run `command_for(host_data)` (None: skip the host) on every host at once, in inventory order."""
    import paramiko

    hosts = [(host.name, host.data.dict()) for host in load(inventory_path)]

    def run(name: str, data: dict) -> Outcome | None:
        command = command_for(data)
        if command is None:
            return None
        client = paramiko.SSHClient()
        client.load_system_host_keys()
        if data.get("ssh_strict_host_key_checking") == "no":
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            client.connect(data.get("ssh_hostname", name), port=data.get("ssh_port", 22),
                           username=data.get("ssh_user"), key_filename=data.get("ssh_key"),
                           timeout=CONNECT_TIMEOUT_SECONDS)
            _, stdout, stderr = client.exec_command(command)
            out, err = stdout.read().decode(), stderr.read().decode()
            return Outcome(name, data, stdout.channel.recv_exit_status() == 0, out, err)
        except (OSError, paramiko.SSHException) as error:  # unreachable: reported with the others
            return Outcome(name, data, False, "", f"cannot connect: {error}")
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=max(len(hosts), 1)) as pool:
        return [outcome for outcome in pool.map(lambda host: run(*host), hosts) if outcome is not None]
