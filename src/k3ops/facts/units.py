"""Facts about systemd units: what state each is in, how often it restarted, and for how long."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from typing_extensions import override

# A unit name ("nvidia-fabricmanager.service", "k3ops-model-fetch@kimi-k3.service"): systemd's characters but
# the "\" of its escapes, and no leading "-", so that neither the shell nor systemctl's options read it.
UNIT_NAME_REGEX = r"[A-Za-z0-9][A-Za-z0-9:_.@-]{0,250}\.(?:service|timer|socket|mount|target)"
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus",
                   "ActiveEnterTimestamp", "StateChangeTimestamp")
NOW_MARKER = "K3OPS_NOW"


class UnitStates(FactBase[dict[str, dict]]):
    """
    Returns each unit's state, its automatic restarts, its main process's last exit status, how long it
    has been active (``None`` when not active), when it last became active and when its state last
    changed (Unix seconds):

    .. code:: python

        {"k3ops-engine.service": {"load": "loaded", "active": "activating", "sub": "auto-restart",
                                  "result": "exit-code", "restarts": 4, "exit_status": 1,
                                  "active_seconds": None, "entered": 1796147776, "changed": 1796147786}}
    """

    @override
    def command(self, units: list[str]):
        checked_unit_names(units)
        # Wall-clock times on both sides (systemd 247+ prints them as @<seconds>): a container's monotonic
        # clock is its host's, while its /proc/uptime may not be.
        return (f"systemctl show --timestamp=unix --property={','.join(UNIT_PROPERTIES)} {' '.join(units)}; "
                f"echo; echo {NOW_MARKER} $(date +%s)")

    default = dict

    @override
    def process(self, output):
        now = next((int(line.split()[1]) for line in output if line.startswith(NOW_MARKER)), None)
        return {block["Id"]: _unit_state(block, now) for block in property_blocks(output)}


class UnitSwitches(FactBase[dict[str, dict[str, bool]]]):
    """
    Returns whether each unit runs and whether it starts at boot, as pyinfra's ``systemd.service`` reads them
    (a sub-state such as ``running`` or ``exited``; an ``enabled`` or ``static`` unit file), for many units
    in one command:

    .. code:: python

        {"docker.service": {"running": True, "enabled": True}}
    """

    @override
    def command(self, units: list[str]):
        return f"systemctl show --property=Id,SubState,UnitFileState {' '.join(checked_unit_names(units))}"

    default = dict

    @override
    def process(self, output):
        return {block["Id"]: {"running": block.get("SubState") in SystemdStatus.state_values,
                              "enabled": block.get("UnitFileState") in SystemdEnabled.state_values}
                for block in property_blocks(output)}


def checked_unit_names(units: list[str]) -> list[str]:
    for unit in units:
        if not re.fullmatch(UNIT_NAME_REGEX, unit):
            raise ValueError(f"{unit!r} is not a systemd unit name")
    return units


def property_blocks(output) -> list[dict[str, str]]:
    """`systemctl show`'s KEY=value lines, one dict per unit (units are apart by a blank line), each with its Id."""
    blocks, current = [], {}
    for line in [*output, ""]:
        if "=" in line:
            key, _, value = line.partition("=")
            current[key] = value
        elif not line.strip() and current:
            blocks.append(current)
            current = {}
    return [block for block in blocks if block.get("Id")]


def _seconds(timestamp: str | None) -> int | None:
    return int(timestamp[1:]) if timestamp and re.match(r"^@\d+$", timestamp) else None


def _unit_state(block: dict, now: int | None) -> dict:
    entered = _seconds(block.get("ActiveEnterTimestamp"))
    active = block.get("ActiveState")
    return {
        "load": block.get("LoadState"),
        "active": active,
        "sub": block.get("SubState"),
        "result": block.get("Result"),
        "restarts": int(block["NRestarts"]) if block.get("NRestarts", "").isdigit() else 0,
        "exit_status": int(block["ExecMainStatus"]) if block.get("ExecMainStatus", "").isdigit() else None,
        "active_seconds": max(now - entered, 0) if active == "active" and entered and now else None,
        "entered": entered,
        "changed": _seconds(block.get("StateChangeTimestamp")),
    }
