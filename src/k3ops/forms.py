"""The value types of inventory data: every field that reaches a host, a file or a command has one of these.

Each check raises ValueError with what was wrong and what to write instead, so pydantic reports it as
`host: field: message`. Values that are legitimate with special characters (engine arguments and
environment values with `%` or `$`) are escaped where they are written (k3ops.escape); what no legitimate
value holds (a newline, a control character, a zone id, a quote in a path or URL) is refused here.

The types: a host name (RFC 1123), an IP address (canonical, no zone id), a host or address, a URL (https
where it carries trust), a path (absolute, or under the controller user's home), an environment variable
name, an SSH public key.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator

# Line breaks of any kind and other control characters: a newline in a unit starts a new directive.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# http(s), a host name or address and a port, and a path of URL characters that are inert in a shell and
# in a config line: no spaces, quotes, `$`, `;`, `&`, query strings or credentials.
HTTP_URL = re.compile(r"^(?P<scheme>https?)://(?:(?P<name>[A-Za-z0-9.-]+)|\[(?P<address>[0-9A-Fa-f:.]+)\])"
                      r"(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%/+=:@,-]*)?$")
HOSTNAME_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
MAX_HOSTNAME = 253
# Path characters that need no quoting anywhere (a unit, `sh -c`, authorized_keys' command="...").
PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9._/+-]+$")
# An environment variable name, as a shell and systemd's Environment= take it.
ENVIRONMENT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An OpenSSH public key line: its type, the base64 key blob, and an optional comment of plain characters.
SSH_PUBLIC_KEY = re.compile(r"^(?P<type>ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)) "
                            r"(?P<blob>[A-Za-z0-9+/]+={0,2})(?: (?P<comment>[A-Za-z0-9._@+-]{1,128}))?$")
# Where an inventory says that plain http may carry trust (the lab's Hub, wheels and signing keys).
PLAIN_HTTP_SETTING = "allow_plain_http"
PLACEHOLDER = "replace the example's placeholder (all zeros) with"


def plain(value: str, name: str = "") -> str:
    """One line of text: a newline or control character would start a new unit directive or command.

    `name` says which entry of a mapping (a flag, a variable) holds the value."""
    found = CONTROL_CHARACTERS.search(value)
    if found:
        raise ValueError(f"{name + ': ' if name else ''}{value!r} contains a line break or control character "
                         f"({found.group()!r}): give one line of plain text")
    return value


def environment(value: dict[str, str], names: re.Pattern | None = None, expected: str = "") -> dict[str, str]:
    """Variables for a process: each an environment name, matching `names` when given (else: "NAME is not
    `expected`"), each value one line."""
    for name, setting in value.items():
        if names is not None and not names.fullmatch(name):
            raise ValueError(f"{name!r} is not {expected}")
        environment_name(name)
        plain(setting, name)
    return value


def http_url(value: str) -> str:
    """An http(s) URL whose characters are inert wherever a deploy writes it (apt sources, pip's options)."""
    found = HTTP_URL.fullmatch(value)
    if not found:
        raise ValueError(f"{value!r} is not an http(s) URL like 'https://mirror.example.com/path/' (letters, "
                         "digits and -._~%/+=:@, only: no spaces, quotes, query string or credentials)")
    if found["address"] is not None:
        ip_address(found["address"])
    elif not found["name"].replace(".", "").isdigit():
        hostname(found["name"])
    return value


def trusted_url(value: str, plain_http_allowed: bool) -> str:
    """A URL whose answer is trusted (signing keys, the Hub's digests, the Python index)."""
    return https_unless_allowed(http_url(value), plain_http_allowed)


def https_unless_allowed(value: str, plain_http_allowed: bool) -> str:
    """https, so that who answers is proven, unless the inventory allows plain http on purpose (a network
    it controls, as the lab's)."""
    if value.startswith("http://") and not plain_http_allowed:
        raise ValueError(f"{value!r}: what this URL serves is trusted, so it must be https (plain http can be "
                         f"answered by anyone on the path); set {PLAIN_HTTP_SETTING} = True only for a network "
                         "you control")
    return value


def hostname(value: str) -> str:
    """An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, at most 253 characters.

    No trailing dot, no leading hyphen (it would read as an option), no glob or list characters."""
    labels = value.split(".")
    if (len(value) > MAX_HOSTNAME or not all(HOSTNAME_LABEL.fullmatch(label) for label in labels)
            or labels[-1].isdigit()):
        raise ValueError(f"{value!r} is not a host name (RFC 1123: letters, digits and inner hyphens in "
                         "dot-separated labels of at most 63, like 'gpu-01.example.com')")
    return value


def ip_address(value: str) -> str:
    """An IP address in its canonical form: no zone id (`%eth0` is any text, and calls itself loopback),
    no IPv4-mapped IPv6, written as Python and every tool print it, so one address has one spelling."""
    if "%" in value:
        raise ValueError(f"{value!r} has an IPv6 zone id (after '%'); give the address alone")
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (like '10.0.0.7' or 'fd00::7')") from None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        raise ValueError(f"{value!r} is an IPv4-mapped IPv6 address; write the IPv4 address {parsed.ipv4_mapped}")
    if str(parsed) != value:
        raise ValueError(f"{value!r} is not in canonical form; write it as {str(parsed)!r}")
    return value


def network_address(value: str) -> str:
    """A host name or an IP address, as ssh and rsync take it."""
    if ":" in value or value.replace(".", "").isdigit():
        return ip_address(value)
    try:
        return hostname(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a host name or an IP address (like 'gpu-01.example.com', "
                         "'10.0.0.7' or 'fd00::7')") from None


def environment_name(value: str) -> str:
    if not ENVIRONMENT_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not an environment variable name (letters, digits and _, not starting "
                         "with a digit)")
    return value


def ssh_public_key(value: str) -> str:
    """One OpenSSH public key line (`ssh-ed25519 AAAA... comment`): a second line would be a second key."""
    found = SSH_PUBLIC_KEY.fullmatch(value)
    if not found:
        raise ValueError(f"{value[:60]!r} is not one OpenSSH public key line (type, key, optional plain comment)")
    try:
        blob = base64.b64decode(found["blob"], validate=True)
    except binascii.Error:
        raise ValueError(f"{value[:60]!r}: the key is not base64") from None
    length = int.from_bytes(blob[:4], "big")
    if blob[4:4 + length].decode("ascii", "replace") != found["type"]:
        raise ValueError(f"{value[:60]!r}: the key's blob is not a {found['type']} key")
    return value


def controller_path(value: str) -> str:
    """A file on the controller: absolute or under the user's home (`~/`), plain characters, no `..`."""
    rest = value.removeprefix("~/")
    if (not PATH_CHARACTERS.fullmatch(rest) or (rest == value and not value.startswith("/"))
            or ".." in PurePosixPath(rest).parts):
        raise ValueError(f"{value!r} is not a plain controller path like '~/.config/k3ops/key' or "
                         "'/etc/k3ops/key' (letters, digits and ._+-/ only, no '..')")
    return value


def relative_path(value: str) -> str:
    """A path inside a directory k3ops owns: relative, no `..`, nothing a shell would read specially."""
    if not PATH_CHARACTERS.fullmatch(value) or value.startswith("/") or ".." in PurePosixPath(value).parts:
        raise ValueError(f"{value!r} is not a relative path like 'UD-Q4_K_XL/model-00001-of-00002.gguf' "
                         "(letters, digits and ._+-/ only, no leading '/', no '..')")
    return value


def not_placeholder(value: str, replacement: str) -> str:
    """The example inventory's all-zero pins stand for values only the operator can look up."""
    if set(value.removeprefix("sha256:")) == {"0"}:
        raise ValueError(f"{PLACEHOLDER} {replacement}")
    return value


PlainText = Annotated[str, AfterValidator(plain)]
HttpUrl = Annotated[str, AfterValidator(http_url)]
Hostname = Annotated[str, AfterValidator(hostname)]
IpAddress = Annotated[str, AfterValidator(ip_address)]
NetworkAddress = Annotated[str, AfterValidator(network_address)]
ControllerPath = Annotated[str, AfterValidator(controller_path)]
