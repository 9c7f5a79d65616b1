"""Validated specs of inventory data, and the check that runs before any host is touched.

An inventory file ends with `validate_inventory(__file__)`: pyinfra's own loader builds the inventory
(group_data included) and every host's data is checked against every spec, so bad data stops
`pyinfra INVENTORY DEPLOY` with one message naming each host and field, before any connection.
"""

from __future__ import annotations

import contextvars
from pathlib import Path

from pydantic import ValidationError
from pyinfra.api.exceptions import InventoryError

from .engine import EngineHostSpec, cluster_errors
from .host import GpuHostSpec
from .model import ModelHostSpec

SPECS = (GpuHostSpec, ModelHostSpec, EngineHostSpec)
_validating = contextvars.ContextVar("k3ops_validating_inventory", default=False)


def connector_keys() -> set[str]:
    """Data keys that belong to pyinfra's connectors (ssh_user, docker_identifier, ...)."""
    from pyinfra.api.connectors import get_all_connectors

    return {key for connector in get_all_connectors().values() for key in getattr(connector, "data_meta", {})}


def host_errors(name: str, data: dict) -> list[str]:
    """Every problem with one host's data, as `host: field: message` lines."""
    known = connector_keys() | {field for spec in SPECS for field in spec.model_fields}
    errors = [f"{name}: {key}: not a k3ops or pyinfra setting (a typo?)"
              for key in sorted(data) if key not in known and not key.startswith("_")]
    for spec in SPECS:
        try:
            spec.model_validate(data)
        except ValidationError as error:
            for problem in error.errors():
                where = ".".join(str(part) for part in problem["loc"])
                message = problem["msg"].removeprefix("Value error, ")
                errors.append(f"{name}: {where}: {message}" if where else f"{name}: {message}")
    return errors


def inventory_errors(inventory) -> list[str]:
    """Every host's errors, then those between hosts (engine clusters) among the hosts without any."""
    errors, valid = [], []
    for host in inventory:
        found = host_errors(host.name, host.data.dict())
        errors += found
        if not found:
            valid.append((host.name, EngineHostSpec.model_validate(host.data.dict()).engine))
    return errors + cluster_errors([(name, engine) for name, engine in valid if engine is not None])


def validate_inventory(inventory_file: str | Path) -> None:
    """Load the inventory as pyinfra will and raise InventoryError listing every bad host and field."""
    if _validating.get():
        return  # the inventory file is being loaded by this very check
    from ..inventory import load

    token = _validating.set(True)
    try:
        errors = inventory_errors(load(inventory_file))
    finally:
        _validating.reset(token)
    if errors:
        raise InventoryError("invalid inventory data:\n  " + "\n  ".join(errors))


def host_spec(host) -> GpuHostSpec:
    """The validated spec of a pyinfra host (inside a deploy)."""
    return GpuHostSpec.model_validate(host.data.dict())


def model_host_spec(host) -> ModelHostSpec:
    """The validated model cache spec of a pyinfra host (inside a deploy)."""
    return ModelHostSpec.model_validate(host.data.dict())


def settings_table() -> str:
    """The README's table of host settings, made from the specs so the two cannot disagree."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for spec in SPECS:
        for name, field in spec.model_fields.items():
            if field.default_factory is not None:
                default = "vendor repositories" if name == "repositories" else repr(field.default_factory())
            else:
                default = "required" if field.is_required() else repr(field.default)
            rows.append(f"| `{name}` | `{default}` | {field.description} |")
    return "\n".join(rows)
