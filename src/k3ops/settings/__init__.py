"""Validated specs of one host's inventory data: every setting, its default and what is allowed.

k3ops.inventory checks a whole inventory with them (validate_inventory) before any host is touched.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ValidationError

from .connection import ConnectionSpec
from .doctor import DoctorSpec
from .controller import controller_errors
from .engine import EngineHostSpec
from .fabric import FabricCheckSpec
from ..forms import network_address
from .host import GpuHostSpec
from .model import ModelHostSpec
from .upgrade import UpgradeSpec

SPECS = (GpuHostSpec, ModelHostSpec, EngineHostSpec, FabricCheckSpec, DoctorSpec, UpgradeSpec, ConnectionSpec)
CONNECTOR_HOST = re.compile(r"^@[a-z]+(?:/[A-Za-z0-9._:@/-]+)?$")


def connector_keys() -> set[str]:
    """Data keys that belong to pyinfra's connectors (ssh_user, docker_identifier, ...)."""
    from pyinfra.api.connectors import get_all_connectors

    return {key for connector in get_all_connectors().values() for key in getattr(connector, "data_meta", {})}


def host_errors(name: str, data: dict) -> list[str]:
    """Every problem with one host's data, as `host: field: message` lines."""
    known = connector_keys() | {field for spec in SPECS for field in spec.model_fields}
    errors = address_form_errors(name, data)
    errors += [f"{name}: {key}: not a k3ops or pyinfra setting (a typo?)"
               for key in sorted(data) if key not in known and not key.startswith("_")]
    for spec in SPECS:
        try:
            spec.model_validate(data)
        except ValidationError as error:
            for problem in error.errors():
                where = ".".join(str(part) for part in problem["loc"])
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


def host_spec(host) -> GpuHostSpec:
    """The validated spec of a pyinfra host (inside a deploy)."""
    return GpuHostSpec.model_validate(host.data.dict())


def model_host_spec(host) -> ModelHostSpec:
    """The validated model cache spec of a pyinfra host (inside a deploy)."""
    return ModelHostSpec.model_validate(host.data.dict())


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
