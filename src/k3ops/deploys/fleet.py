"""Hosts of one inventory that work together: the ones sharing a checkpoint, or forming one engine."""

from __future__ import annotations

from pyinfra import inventory, state


def members(selected) -> list:
    """The inventory's hosts for which `selected(host)` holds, in inventory order (the whole inventory,
    not only this run's hosts: a host deployed alone with --limit still finds its peers)."""
    return [member for member in inventory if selected(member)]


def in_this_run(selected) -> list:
    """The hosts this pyinfra run deploys (its --limit) for which `selected(host)` holds, in inventory order."""
    return [member for member in members(selected) if state.is_host_in_limit(member)]
