"""systemd services started, stopped, restarted and enabled as pyinfra's ``systemd.service`` does, reading the
units k3ops manages together: pyinfra's asks two questions of each unit, ten a GPU host rerun."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from k3ops.facts.memo import remembered
from k3ops.facts.units import UnitSwitches
from k3ops.onhost.layout import ENGINE_UNIT, METRICS_TIMER, WATCHDOG_TIMER
from k3ops.vendor_units import (AMD_METRICS_EXPORTER, DCGM, DCGM_EXPORTER, DOCKER, FABRIC_MANAGER, GPU_AGENT, IMEX,
                                NODE_EXPORTER, PERSISTENCED, TIME_SYNC)

# The units a deploy of k3ops starts, read in one command by whichever of them is asked about first.
READ_TOGETHER = (*(f"{unit}.service" for unit in (DCGM, DCGM_EXPORTER, DOCKER, FABRIC_MANAGER, IMEX, NODE_EXPORTER,
                                                 PERSISTENCED, TIME_SYNC, AMD_METRICS_EXPORTER, GPU_AGENT)),
                 ENGINE_UNIT, WATCHDOG_TIMER, METRICS_TIMER)


def unit_name(unit: str) -> str:
    return unit if "." in unit else f"{unit}.service"


def switches(unit: str) -> dict[str, bool]:
    """Whether the unit runs and starts at boot, read with the units k3ops starts (`UnitSwitches`)."""
    name = unit_name(unit)
    units = list(READ_TOGETHER) if name in READ_TOGETHER else [*READ_TOGETHER, name]
    return remembered(UnitSwitches, units=units).get(name, {"running": False, "enabled": False})


@operation()
def service(unit: str, running: bool | None = None, enabled: bool | None = None, restarted: bool = False):
    """
    A unit running or stopped, enabled or disabled at boot; restarted only if it was running (a unit started
    here needs no restart).

    + unit: the unit (``.service`` when it names no type)
    + running: whether it should run (``None``: leave it)
    + enabled: whether it should start at boot (``None``: leave it)
    + restarted: restart it if it runs

    **Example:**

    .. code:: python

        units.service(name="Run Docker", unit="docker", running=True, enabled=True)
    """

    name = unit_name(unit)
    found = switches(name)
    if running is not None and found["running"] != running:
        yield StringCommand("systemctl", "start" if running else "stop", QuoteString(name))
    elif running is not None:
        host.noop(f"{name} is {'running' if running else 'stopped'}")
    if restarted and found["running"]:
        yield StringCommand("systemctl", "restart", QuoteString(name))
    elif restarted and running is None:
        host.noop(f"{name} is not running: nothing to restart")
    if enabled is not None and found["enabled"] != enabled:
        yield StringCommand("systemctl", "enable" if enabled else "disable", QuoteString(name))
