"""Reading a pyinfra inventory file, for k3ops' own commands and for testinfra."""

from __future__ import annotations

from pathlib import Path


def load(path: str | Path):
    """The pyinfra Inventory that `pyinfra PATH ...` would use (group_data included)."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    # pyinfra executes inventory files inside a State context, as its CLI does.
    with ctx_state.use(State()):
        return make_inventory(str(path), cwd=str(Path.cwd()))


def testinfra_hosts(path: str | Path) -> list:
    """One testinfra host per inventory host, connected over SSH with the inventory's own SSH data."""
    import testinfra

    hosts = []
    for host in load(path):
        data = host.data.dict()
        address = data.get("ssh_hostname", host.name)
        user = data.get("ssh_user", "root")
        port = data.get("ssh_port", 22)
        test_host = testinfra.get_host(f"paramiko://{user}@{address}:{port}", ssh_identity_file=data.get("ssh_key"))
        test_host.inventory_name = host.name
        test_host.inventory_data = data
        hosts.append(test_host)
    return hosts
