"""One escaper per file format a value lands in: a systemd unit, authorized_keys, known_hosts, the IMEX
nodes file, a PromQL selector. Templates receive values only through these.

The spec refuses what no legitimate value holds (k3ops.forms); these keep what remains literal where
it is written, and refuse a line break outright: no escaping makes a newline inert in a line format, and
a value with one would add a directive, a key or a host.
"""

from __future__ import annotations

import json
import re

from .forms import network_address, plain, ssh_public_key

# Words systemd reads literally without quotes; others are double-quoted with C escapes.
SYSTEMD_PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
SSH_PORT = 22


def _one_line(value: str) -> str:
    try:
        return plain(value)
    except ValueError as error:
        raise ValueError(f"refusing to write {error}") from None


def _double_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_word(word: str) -> str:
    """One word of a systemd command line (Exec*=), read back literally: specifiers (%) and variables ($)
    doubled, double-quoted with C escapes unless plain."""
    escaped = _one_line(word).replace("%", "%%").replace("$", "$$")
    return escaped if SYSTEMD_PLAIN_WORD.fullmatch(word) else _double_quoted(escaped)


def systemd_command(argv: list[str]) -> str:
    """An Exec*= line's value: each word escaped on its own, the program an absolute path (a leading `-`,
    `+`, `@` or `!` there would change how systemd runs it)."""
    if not argv or not argv[0].startswith("/"):
        raise ValueError(f"refusing to write a command whose program is not an absolute path: {argv[:1]!r}")
    return " ".join(systemd_word(word) for word in argv)


def systemd_assignment(key: str, value: str) -> str:
    """An Environment= value: one quoted KEY=value, read back literally (systemd expands no $ there)."""
    return _double_quoted(f"{key}={_one_line(value)}".replace("%", "%%"))


def systemd_value(value: str) -> str:
    """The value of a plain unit setting (Description=, User=, RequiresMountsFor=): one line, specifiers
    doubled."""
    return _one_line(value).replace("%", "%%")


def authorized_keys_line(options: list[tuple[str, str | None]], public_key: str) -> str:
    """One authorized_keys line: options (`name` or `name="value"`, sshd unescapes only \\" in a value)
    before a validated public key."""
    words = [name if value is None else f'{name}="{_one_line(value).replace(chr(34), chr(92) + chr(34))}"'
             for name, value in options]
    return f"{','.join(words)} {ssh_public_key(public_key)}"


def known_hosts_line(address: str, port: int, public_key: str) -> str:
    """One known_hosts line: the host (`[address]:port` off port 22) and its validated host key."""
    name = network_address(address)
    return f"{name if port == SSH_PORT else f'[{name}]:{port}'} {ssh_public_key(public_key)}"


def imex_nodes_file(addresses: list[str]) -> str:
    """nvidia-imex's nodes config: one address per line, nothing else."""
    return "".join(f"{network_address(address)}\n" for address in addresses)


def promql_string(value: str) -> str:
    """A PromQL string literal (a label matcher's value): double-quoted with Go's escapes, which JSON's are a
    subset of, so no value ends the string or the selector."""
    return json.dumps(value)


def re2_literal(value: str) -> str:
    """A regular expression (RE2, as Prometheus' =~ matches) that matches `value` only: its metacharacters
    escaped, and nothing else (RE2 refuses an escaped letter or space, which Python's re.escape makes)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)
