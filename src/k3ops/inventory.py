"""Reading a pyinfra inventory file, checking it before any host is touched, and reaching its hosts outside a
deploy (host checks, status commands).

An inventory file ends with `validate_inventory(__file__)`: pyinfra's own loader builds the inventory
(group_data included) and every host's data is checked against every spec (k3ops.settings), so bad data stops
`pyinfra INVENTORY DEPLOY` with one message naming each host and field, before any connection. The
file's own groups are read too, for what pyinfra's merge would hide: a host defined twice.
"""

from __future__ import annotations

import contextvars
import getpass
import os
import traceback
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import partial
from pathlib import Path

# pyinfra's CLI patches the whole process for gevent when first imported, which must happen on the main thread
# (from a worker thread, the import itself fails): import it with this module, not inside `load`.
import pyinfra_cli.inventory  # noqa: F401
from pyinfra.api.exceptions import InventoryError

from .facts.reader import read_fact
from .settings import host_errors, host_settings, settings_of
from .settings.engine import cluster_errors
from .ssh_liveness import keep_alive

DEFAULT_SSH_PORT = 22
CONNECT_TIMEOUT_SECONDS = 10
# pyinfra's own default is accept-new: a host's key trusted on first connection, whoever answers.
HOST_KEY_CHECKING = "ssh_strict_host_key_checking"
_validating = contextvars.ContextVar("k3ops_validating_inventory", default=False)


def check_host_keys_by_default() -> None:
    """Deploys check host keys as k3ops's own SSH does: a host whose data does not opt out (the lab sets
    'no') must be in ~/.ssh/known_hosts or its ssh_known_hosts_file. pyinfra takes a connector setting's
    default when it makes each host, after loading the inventory file, which calls this through
    validate_inventory."""
    from pyinfra.connectors.ssh import SSHConnector

    SSHConnector.data_meta[HOST_KEY_CHECKING].default = "yes"


class BadInput(InventoryError):
    """An inventory or --limit that cannot be used at all: no such file, a file that fails to load, no host, a
    --limit that selects nothing. No host was asked, so nothing is known: never a healthy empty fleet. An
    InventoryError, so that pyinfra's own CLI, loading an inventory that validates itself, says it in one line too."""


def load(path: str | Path, data: dict | None = None):
    """The pyinfra Inventory that `pyinfra PATH ...` would use (group_data included); `data` overrides every
    host's, as `pyinfra --data KEY=VALUE` does (a rollout's new driver version). Only a file: pyinfra would read
    a mistyped path as a host name, or a module, or nothing."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    if not Path(path).is_file():
        raise BadInput(f"{path}: no such inventory file" if not Path(path).exists() else f"{path}: not a file")
    # pyinfra executes inventory files inside a State context, as its CLI does.
    with ctx_state.use(State()):
        try:
            inventory = make_inventory(str(path), override_data=data, cwd=str(Path.cwd()))
        except InventoryError:
            raise  # said already: the inventory's own validation, or a file it loads (BadInput)
        except Exception as error:  # the user's Python: it may raise anything
            raise BadInput(f"{path}: cannot be loaded: {failure(error, path)}") from None
    if not len(inventory):
        raise BadInput(f"{path}: names no host (an inventory defines groups: lists of host names or (name, data) "
                       "pairs)")
    return inventory


def failure(error: Exception, path: str | Path) -> str:
    """Why an inventory failed to load, in one line: the exception, and where (the group data file, if not the
    inventory itself, and the line) when known."""
    from pyinfra_cli.exceptions import UnexpectedExternalError

    cause = error.exception if isinstance(error, UnexpectedExternalError) else error
    if isinstance(cause, SyntaxError):
        file, line, why = cause.filename, cause.lineno, cause.msg
    else:
        file = error.filename if isinstance(error, UnexpectedExternalError) else None
        line = next((frame.lineno for frame in reversed(traceback.extract_tb(cause.__traceback__))
                     if frame.filename == file), None)
        why = str(cause)
    where = f"{file}: " if file and Path(file).resolve() != Path(path).resolve() else ""
    return " ".join(f"{where}{f'line {line}: ' if line else ''}{type(cause).__name__}: {why}".split())


@dataclass(frozen=True)
class SshTarget:
    """How to reach an inventory host over SSH: the inventory's own connection data, with pyinfra's defaults."""

    name: str
    data: dict
    address: str
    port: int
    user: str
    key: str | None
    check_host_key: bool
    known_hosts: str | None

    @classmethod
    def of(cls, host) -> SshTarget:
        data = host.data.dict()
        return cls(name=host.name, data=data, address=data.get("ssh_hostname") or host.name,
                   port=int(data.get("ssh_port") or DEFAULT_SSH_PORT),
                   # pyinfra's SSH connector leaves an unset user to paramiko, which logs in as the local user.
                   user=data.get("ssh_user") or getpass.getuser(),
                   key=os.path.expanduser(data["ssh_key"]) if data.get("ssh_key") else None,
                   check_host_key=data.get(HOST_KEY_CHECKING) != "no",
                   known_hosts=data.get("ssh_known_hosts_file"))

    def connect(self):
        """A paramiko session as pyinfra would open it: the host's key must be known (~/.ssh/known_hosts,
        or the inventory's ssh_known_hosts_file) unless the inventory turns the check off, as the lab does;
        a host that stops answering fails it within the data's ssh_lost_after_seconds."""
        import paramiko

        client = paramiko.SSHClient()
        if self.check_host_key:
            client.load_system_host_keys()
            if self.known_hosts:
                client.load_host_keys(os.path.expanduser(self.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        client.connect(self.address, port=self.port, username=self.user, key_filename=self.key,
                       timeout=CONNECT_TIMEOUT_SECONDS)
        keep_alive(client.get_transport(), settings_of(self.data).connection)
        return client


def targets(path: str | Path, limit: list[str] | None = None, data: dict | None = None) -> list[SshTarget]:
    return [SshTarget.of(host) for host in selected(path, limit, data)]


def selected(path: str | Path, limit: list[str] | None, data: dict | None = None) -> list:
    """The inventory's hosts, their data validated before any is touched; `limit` (None: every host): what
    pyinfra's --limit takes, host names, group names or globs of host names, each of which must match a host
    (a typo or an empty --limit is an error, not a silently smaller or larger run), and each may list several
    separated by commas; `data`: as `load`'s."""
    patterns = None if limit is None else [part for item in limit for part in item.split(",")]
    if patterns is not None and not (patterns and all(pattern.strip() for pattern in patterns)):
        raise BadInput(f"--limit: {','.join(limit)!r} names no host; give host names, group names or globs, or "
                       "leave --limit out for every host")
    inventory = load(path, data)
    errors = inventory_errors(inventory)
    if errors:
        raise InventoryError("invalid inventory data:\n  " + "\n  ".join(errors))
    chosen = set()
    for pattern in patterns or []:
        matches = limit_matches(inventory, pattern)
        if not matches:
            raise BadInput(f"--limit: {pattern!r} matches no host of {path}")
        chosen |= matches
    return [host for host in inventory if patterns is None or host.name in chosen]


def limit_matches(inventory, pattern: str) -> set[str]:
    """The names of the hosts one --limit pattern selects, as pyinfra's own --limit: a group's hosts, else the
    hosts whose names match the glob."""
    from pyinfra.api.exceptions import NoGroupError

    try:
        return {host.name for host in inventory.get_group(pattern)}
    except NoGroupError:
        return {host.name for host in inventory if fnmatch(host.name, pattern)}


def _run_over_testinfra(test_host, command: str) -> tuple[bool, str, str]:
    result = test_host.run(command)
    return result.rc == 0, result.stdout, result.stderr


def testinfra_hosts(path: str | Path, limit: list[str] | None = None, data: dict | None = None) -> list:
    """One testinfra host per inventory host (`limit`, `data`: as `selected`'s), connected (when first used) by
    SshTarget.connect, with `get_fact` asking k3ops facts as a deploy would."""
    from functools import cached_property

    from testinfra.backend.paramiko import ParamikoBackend
    from testinfra.host import Host

    class InventoryBackend(ParamikoBackend):
        @cached_property
        def client(self):
            return self.target.connect()

    hosts = []
    for target in targets(path, limit, data):
        backend = InventoryBackend(f"{target.user}@{target.address}:{target.port}")
        backend.target = target
        test_host = Host(backend)
        backend.set_host(test_host)
        test_host.inventory_name = target.name
        test_host.inventory_data = target.data
        test_host.get_fact = partial(read_fact, partial(_run_over_testinfra, test_host))
        hosts.append(test_host)
    return hosts


def inventory_errors(inventory, groups: dict | None = None) -> list[str]:
    """Every host's errors, then those between hosts: hosts defined twice in the inventory file's `groups`
    (when given), hosts sharing an SSH address, engine clusters among the hosts without errors."""
    errors, valid = [], []
    for host in inventory:
        found = host_errors(host.name, host.data.dict())
        errors += found
        if not found:
            valid.append((host.name, host_settings(host).engine.engine))
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
