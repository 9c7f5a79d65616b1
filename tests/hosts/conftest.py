"""Host checks run against any inventory: `k3ops check INVENTORY` (or `pytest tests/hosts --inventory INVENTORY`).

Each test runs once per inventory host it applies to (`pytest.mark.applies_to("nvidia", "amd")` picks
hosts by GPU vendor; `pytest.mark.engine_role("head")` or `("worker")` picks the ranks of multi-node engines,
a host serving alone being a head), over SSH with the inventory's own connection data, and reads what to
expect from the host's validated spec, never from constants.
"""

from __future__ import annotations

import pytest

from k3ops.inventory import testinfra_hosts
from k3ops.settings import node_rank, settings_of


def pytest_addoption(parser):
    parser.addoption("--inventory", help="pyinfra inventory file whose hosts to check")
    parser.addoption("--limit", action="append",
                     help="check only these hosts: host names, group names or globs, as pyinfra's --limit")
    parser.addoption("--data", action="append", metavar="KEY=VALUE",
                     help="override every host's data, as `pyinfra --data` (a rollout's new driver version)")


def pytest_configure(config):
    config.addinivalue_line("markers", "applies_to(*vendors): run only on hosts whose gpu_vendor is one of them")
    config.addinivalue_line("markers", "engine_role(role): run only on engine heads (rank 0) or only on workers")


def parse_data(pairs: list[str]) -> dict:
    """`KEY=VALUE` overrides, read as pyinfra's CLI reads them."""
    from pyinfra_cli.util import parse_cli_arg

    for pair in pairs:
        if "=" not in pair:
            raise pytest.UsageError(f"--data {pair!r}: give KEY=VALUE")
    return {key: parse_cli_arg(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def _hosts(config):
    cache = getattr(config, "_k3ops_hosts", None)
    if cache is None:
        inventory = config.getoption("--inventory")
        if not inventory:
            raise pytest.UsageError("tests/hosts needs --inventory INVENTORY (e.g. inventory/lab/hosts.py)")
        hosts = testinfra_hosts(inventory, limit=config.getoption("--limit"),
                                data=parse_data(config.getoption("--data") or []))
        everyone = [(host.inventory_name, host.inventory_data) for host in hosts]
        for host in hosts:
            host.node_rank = node_rank(host.inventory_name, everyone)
        cache = config._k3ops_hosts = [(host, settings_of(host.inventory_data).gpu) for host in hosts]
    return cache


def pytest_generate_tests(metafunc):
    """Parametrize by host; a test that takes `model` (or `engine`) runs on the hosts whose data names one, one that
    takes `monitoring` on the hosts whose exporters are on."""
    if "host" not in metafunc.fixturenames:
        return
    vendors = metafunc.definition.get_closest_marker("applies_to")
    role = metafunc.definition.get_closest_marker("engine_role")
    selected = [(host, spec) for host, spec in _hosts(metafunc.config)
                if (vendors is None or spec.gpu_vendor in vendors.args)
                and (role is None or role.args[0] == ("head" if host.node_rank == 0 else "worker"))]
    for name, read in (("engine", lambda data: settings_of(data).engine.engine),
                       ("model", lambda data: settings_of(data).model),
                       ("monitoring", lambda data: settings_of(data).monitoring if settings_of(data).monitoring.monitoring
                        else None)):
        if name in metafunc.fixturenames:
            cases = [(host, spec, read(host.inventory_data)) for host, spec in selected]
            cases = [case for case in cases if case[2] is not None and getattr(case[2], "model", True) is not None]
            metafunc.parametrize(f"host, spec, {name}", cases, ids=[case[0].inventory_name for case in cases])
            return
    metafunc.parametrize("host, spec", selected, ids=[host.inventory_name for host, _ in selected])
