"""Validated specs of inventory data, and the check that runs before any host is touched.

An inventory file ends with `validate_inventory(__file__)`: pyinfra's own loader builds the inventory
(group_data included) and every host's data is checked against every spec, so bad data stops
`pyinfra INVENTORY DEPLOY` with one message naming each host and field, before any connection. The
file's own groups are read too, for what pyinfra's merge would hide: a host defined twice.
"""

from __future__ import annotations

import contextvars
import re
from pathlib import Path

from pydantic import ValidationError
from pyinfra.api.exceptions import InventoryError

from .connection import ConnectionSpec
from .doctor import DoctorSpec
from .controller import controller_errors
from .engine import EngineHostSpec, cluster_errors
from .fabric import FabricCheckSpec
from .forms import network_address
from .host import GpuHostSpec
from .model import ModelHostSpec
from .upgrade import UpgradeSpec

SPECS = (GpuHostSpec, ModelHostSpec, EngineHostSpec, FabricCheckSpec, DoctorSpec, UpgradeSpec, ConnectionSpec)
CONNECTOR_HOST = re.compile(r"^@[a-z]+(?:/[A-Za-z0-9._:@/-]+)?$")
_validating = contextvars.ContextVar("k3ops_validating_inventory", default=False)


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


def inventory_errors(inventory, groups: dict | None = None) -> list[str]:
    """Every host's errors, then those between hosts: hosts defined twice in the inventory file's `groups`
    (when given), hosts sharing an SSH address, engine clusters among the hosts without errors."""
    errors, valid = [], []
    for host in inventory:
        found = host_errors(host.name, host.data.dict())
        errors += found
        if not found:
            valid.append((host.name, EngineHostSpec.model_validate(host.data.dict()).engine))
    return (errors + definition_errors(groups or {}) + address_errors(inventory)
            + cluster_errors([(name, engine) for name, engine in valid if engine is not None]))


def definition_errors(groups: dict) -> list[str]:
    """Hosts defined twice in an inventory file's groups, which pyinfra would merge silently, the last data
    winning key by key. A host named in several groups is a member of each (like group_data/all.py's `all`);
    it is defined twice when two groups give it different data, or one group lists it twice."""
    errors, defined = [], {}
    for group, hosts in groups.items():
        listed = set()
        for entry in hosts[0] if isinstance(hosts, tuple) else hosts:
            name, data = (entry[0], entry[1]) if isinstance(entry, tuple) and len(entry) == 2 else (entry, None)
            if name in listed:
                errors.append(f"{name}: listed twice in group {group!r}; list each host once")
                continue
            listed.add(name)
            if not data:
                continue
            first = defined.setdefault(name, (group, data))
            if first[1] != data:
                errors.append(f"{name}: defined twice, in groups {first[0]!r} and {group!r}, with different data "
                              "(pyinfra would merge them, the last winning); give its data once and name it "
                              "alone in its other groups")
    return errors


def address_errors(inventory) -> list[str]:
    """Hosts that are one machine: the same SSH address and port (ssh_hostname, else the host's name)."""
    from ..inventory import SshTarget

    errors, first = [], {}
    for host in inventory:
        try:
            target = SshTarget.of(host)
        except (TypeError, ValueError):
            continue  # an ssh_port that is not a number: pyinfra's own connector refuses it
        other = first.setdefault((target.address.lower(), target.port), host.name)
        if other != host.name:
            errors.append(f"{host.name}: ssh_hostname: {target.address} port {target.port} is also the SSH address "
                          f"of {other}; each inventory host must be a machine of its own")
    return errors


def defined_groups(inventory_file: str | Path) -> dict:
    """The inventory file's groups as it defines them, before pyinfra merges their hosts: read by the
    function pyinfra's CLI reads them with (make_inventory_from_files), so what counts as a group is pyinfra's."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import _get_groups_from_filename

    with ctx_state.use(State()):  # as pyinfra's CLI executes inventory files
        return _get_groups_from_filename(str(inventory_file))


def validate_inventory(inventory_file: str | Path) -> None:
    """Load the inventory as pyinfra will and raise InventoryError listing every bad host and field."""
    from ..inventory import check_host_keys_by_default, load

    check_host_keys_by_default()
    if _validating.get():
        return  # the inventory file is being loaded by this very check

    token = _validating.set(True)
    try:
        errors = inventory_errors(load(inventory_file), defined_groups(inventory_file))
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
