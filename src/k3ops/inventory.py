"""Reading a pyinfra inventory file, and reaching its hosts outside a deploy (host checks, status commands)."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .facts.reader import read_fact

DEFAULT_SSH_PORT = 22


def load(path: str | Path):
    """The pyinfra Inventory that `pyinfra PATH ...` would use (group_data included)."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    # pyinfra executes inventory files inside a State context, as its CLI does.
    with ctx_state.use(State()):
        return make_inventory(str(path), cwd=str(Path.cwd()))


@dataclass(frozen=True)
class SshTarget:
    """How to reach an inventory host over SSH: the inventory's own connection data, with pyinfra's defaults."""

    name: str
    data: dict
    address: str
    port: int
    user: str
    key: str | None
    check_host_key: bool

    @classmethod
    def of(cls, host) -> SshTarget:
        data = host.data.dict()
        return cls(name=host.name, data=data, address=data.get("ssh_hostname") or host.name,
                   port=int(data.get("ssh_port") or DEFAULT_SSH_PORT),
                   # pyinfra's SSH connector leaves an unset user to paramiko, which logs in as the local user.
                   user=data.get("ssh_user") or getpass.getuser(),
                   key=os.path.expanduser(data["ssh_key"]) if data.get("ssh_key") else None,
                   check_host_key=data.get("ssh_strict_host_key_checking") != "no")


def targets(path: str | Path) -> list[SshTarget]:
    return [SshTarget.of(host) for host in load(path)]


def _run_over_testinfra(test_host, command: str) -> tuple[bool, str, str]:
    result = test_host.run(command)
    return result.rc == 0, result.stdout, result.stderr


def testinfra_hosts(path: str | Path) -> list:
    """One testinfra host per inventory host, with `get_fact` asking k3ops facts as a deploy would."""
    import testinfra

    hosts = []
    for target in targets(path):
        test_host = testinfra.get_host(f"paramiko://{target.user}@{target.address}:{target.port}",
                                       ssh_identity_file=target.key)
        test_host.inventory_name = target.name
        test_host.inventory_data = target.data
        test_host.get_fact = partial(read_fact, partial(_run_over_testinfra, test_host))
        hosts.append(test_host)
    return hosts
