"""What a rolling driver upgrade moves and in what order: engine groups, the budget, the batches.

The unit of upgrade is an engine group: every host of one `engine.cluster` (a multi-node engine cannot run
with one rank on another driver), or a host serving alone. The budget is serving capacity, in hosts: a batch
never takes more hosts out of service than max-unavailable, counting hosts that are already out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..settings import cluster_members, settings_of

MAX_UNAVAILABLE = re.compile(r"^(?P<count>\d+)(?P<percent>%?)$")


@dataclass(frozen=True)
class Group:
    """One engine group: its name (the cluster's, or the host's own) and its hosts, head first."""

    name: str
    hosts: tuple[str, ...]


def engine_groups(hosts: list[tuple[str, dict]]) -> list[Group]:
    """The groups of these hosts (`(name, data)`, inventory order), in the order of their first host."""
    groups, seen = [], set()
    for name, data in hosts:
        engine = settings_of(data).engine.engine
        cluster = engine.cluster if engine is not None else None
        if cluster is None:
            groups.append(Group(name, (name,)))
        elif cluster not in seen:
            seen.add(cluster)
            groups.append(Group(cluster, tuple(cluster_members(cluster, hosts))))
    return groups


def budget(max_unavailable: str, total_hosts: int) -> int:
    """Hosts that may be out of service at once: `N`, or `P%` of the rollout's hosts rounded down (never over
    P%); a budget of no host is refused, since nothing could ever move."""
    found = MAX_UNAVAILABLE.fullmatch(max_unavailable.strip())
    if found is None:
        raise ValueError(f"--max-unavailable: {max_unavailable!r} is not a number of hosts or a percentage "
                         "(like 1 or 25%)")
    count = int(found["count"])
    if found["percent"]:
        if not 0 < count <= 100:
            raise ValueError(f"--max-unavailable: {max_unavailable} is not a percentage between 1% and 100%")
        hosts = math.floor(total_hosts * count / 100)
        if hosts < 1:
            raise ValueError(f"--max-unavailable: {max_unavailable} of {total_hosts} hosts is no host at all; "
                             "give a larger share or a number of hosts")
        return hosts
    if count < 1:
        raise ValueError("--max-unavailable: 0 would never let a host out of service, so nothing could be "
                         "upgraded; give 1 or more")
    return count


def oversized(groups: list[Group], allowed: int) -> list[str]:
    """Why groups cannot fit the budget at all: a group goes out of service whole."""
    return [f"engine group {group.name} ({', '.join(group.hosts)}) has {len(group.hosts)} hosts, more than "
            f"--max-unavailable allows out of service at once ({allowed})"
            for group in groups if len(group.hosts) > allowed]


def next_batch(pending: list[Group], room: int, down: set[str] = frozenset()) -> list[Group]:
    """The next groups in order that fit together in `room` hosts (it stops at the first that does not fit:
    the order is the plan's, a small group does not jump the queue). A group's hosts that are `down` already
    take no more room: the budget counted them."""
    batch, used = [], 0
    for group in pending:
        needs = len(set(group.hosts) - down)
        if used + needs > room:
            break
        batch.append(group)
        used += needs
    return batch


def batches(groups: list[Group], canaries: int, allowed: int) -> list[list[Group]]:
    """The plan when no host is out of service: the canary groups first, alone in their batches, then the rest,
    each batch as large as the budget allows."""
    planned, rest = [], list(groups)
    for stage in (rest[:canaries], rest[canaries:]):
        while stage:
            batch = next_batch(stage, allowed)
            planned.append(batch)
            stage = stage[len(batch):]
    return planned
