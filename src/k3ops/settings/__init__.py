"""Validated specs of one host's inventory data: every setting, its default and what is allowed.

k3ops.inventory checks a whole inventory with them (validate_inventory) before any host is touched; everything
else reads a host's settings through `host_settings` / `settings_of`, validated once per process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .connection import ConnectionSpec
from .doctor import DoctorSpec
from .controller import controller_errors
from .engine import EngineHostSpec
from .fabric import FabricCheckSpec
from ..forms import network_address
from ..hardware import DCGM_EXPORTER_PAIRS
from .host import GpuHostSpec
from .model import ModelHostSpec
from .monitoring import MonitoringSpec
from .upgrade import UpgradeSpec

CONNECTOR_HOST = re.compile(r"^@[a-z]+(?:/[A-Za-z0-9._:@/-]+)?$")


class HostSettings(BaseModel):
    """Every spec of one host, each read from the same flat inventory data."""

    model_config = ConfigDict(frozen=True)

    gpu: GpuHostSpec
    model: ModelHostSpec
    engine: EngineHostSpec
    fabric: FabricCheckSpec
    doctor: DoctorSpec
    upgrade: UpgradeSpec
    connection: ConnectionSpec
    monitoring: MonitoringSpec

    @model_validator(mode="before")
    @classmethod
    def _flat_data(cls, data):
        """Inventory data is flat (`hardware_profile = ...`): each spec takes the keys it knows from all of it."""
        return {name: data for name in cls.model_fields}

    @model_validator(mode="after")
    def _exporter_paired_with_dcgm(self) -> HostSettings:
        """A monitored NVIDIA host runs DCGM's exporter, at the release paired with its DCGM."""
        gpu = self.gpu
        if (self.monitoring.monitoring and gpu.gpu_vendor == "nvidia" and gpu.dcgm
                and gpu.dcgm_exporter_package_version is None):
            raise ValueError(f"dcgm_exporter_version: k3ops knows no DCGM exporter release paired with DCGM "
                             f"{gpu.dcgm_release} (it knows {', '.join(sorted(DCGM_EXPORTER_PAIRS))}); set the "
                             "exporter's package version that NVIDIA builds on that DCGM")
        return self


SPECS = tuple(field.annotation for field in HostSettings.model_fields.values())
# Each host's settings by its data's repr, validated once per process however often they are read. The repr tells
# apart all that validation does (1 and "1", True and 1), and a host's data reads the same, in the same order,
# each time.
_VALIDATED: dict[str, HostSettings] = {}


def settings_of(data: Mapping) -> HostSettings:
    """The validated settings of one host's inventory data (raises pydantic's ValidationError if bad)."""
    key = repr(data)
    if key not in _VALIDATED:
        _VALIDATED[key] = HostSettings.model_validate(data)
    return _VALIDATED[key]


def host_settings(host) -> HostSettings:
    """The validated settings of a pyinfra host."""
    return settings_of(host.data.dict())


def cluster_members(cluster: str, hosts: list[tuple[str, dict]]) -> list[str]:
    """The hosts of one multi-node engine among `hosts` (`(name, data)`, in inventory order); the first is
    its head, rank 0, the only one serving HTTP."""
    return [name for name, data in hosts
            if (engine := settings_of(data).engine.engine) is not None and engine.cluster == cluster]


def node_rank(name: str, hosts: list[tuple[str, dict]]) -> int:
    """A host's rank in its multi-node engine; 0 for a head and for a host serving alone."""
    engine = settings_of(dict(hosts)[name]).engine.engine
    return 0 if engine is None or engine.cluster is None else cluster_members(engine.cluster, hosts).index(name)


@functools.cache
def connector_keys() -> frozenset[str]:
    """Data keys that belong to pyinfra's connectors (ssh_user, docker_identifier, ...): read once, as pyinfra
    finds its connectors by scanning every installed distribution's entry points (about 10 ms, which every host of
    an inventory paid at each validation)."""
    from pyinfra.api.connectors import get_all_connectors

    return frozenset(key for connector in get_all_connectors().values() for key in getattr(connector, "data_meta", {}))


def host_errors(name: str, data: dict) -> list[str]:
    """Every problem with one host's data, as `host: field: message` lines."""
    known = connector_keys() | {field for spec in SPECS for field in spec.model_fields}
    errors = address_form_errors(name, data)
    errors += [f"{name}: {key}: not a k3ops or pyinfra setting (a typo?)"
               for key in sorted(data) if key not in known and not key.startswith("_")]
    try:
        settings_of(data)
    except ValidationError as error:
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"][1:])  # less the bundle's field: the data's own key
            message = problem["msg"].removeprefix("Value error, ")
            errors.append(f"{name}: {where}: {message}" if where else f"{name}: {message}")
    return errors + [f"{name}: {problem}" for problem in controller_errors(data)]


def address_form_errors(name: str, data: dict) -> list[str]:
    """The host's name and SSH address are words of known_hosts, mpirun's host list, rsync and balancer
    commands: a host name or an IP address, nothing a glob, a list or an option could read."""
    errors = []
    if name.startswith("@"):  # another connector's host (@local, @docker/IMAGE): its own kind of name
        if not CONNECTOR_HOST.fullmatch(name):
            errors.append(f"{name!r}: the inventory's host name: not a connector host like '@docker/debian:12'")
        return errors
    try:
        network_address(name)
    except ValueError as error:
        errors.append(f"{name!r}: the inventory's host name: {error}")
    address = data.get("ssh_hostname")
    if address is not None:
        try:
            network_address(address if isinstance(address, str) else repr(address))
        except ValueError as error:
            errors.append(f"{name}: ssh_hostname: {error}")
    return errors


def settings_table(specs: tuple[type[BaseModel], ...] = SPECS) -> str:
    """The docs' table of the specs' settings (default: every host setting), made from them so the two cannot
    disagree; docs/hooks.py puts it in the settings page."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for spec in specs:
        for name, field in spec.model_fields.items():
            if field.default_factory is not None:
                default = "vendor repositories" if name == "repositories" else repr(field.default_factory())
            else:
                default = "required" if field.is_required() else repr(field.default)
            rows.append(f"| `{name}` | `{default}` | {field.description} |")
    return "\n".join(rows)
