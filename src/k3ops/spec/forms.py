"""The forms free text in inventory data must have: what reaches a unit file, a shell or a config line.

Each check raises ValueError with what was wrong and what to write instead, so pydantic reports it as
`host: field: message`. Values that are legitimate with special characters (engine arguments and
environment values with `%` or `$`) are escaped where they are written; what no legitimate value holds
(a newline, a control character, a quote in a path or URL) is refused here.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator

# Line breaks of any kind and other control characters: a newline in a unit starts a new directive.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# http(s), a host name or address and a port, and a path of URL characters that are inert in a shell and
# in a config line: no spaces, quotes, `$`, `;`, `&`, query strings or credentials.
HTTP_URL = re.compile(r"^https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%/+=:@,-]*)?$")
HOSTNAME_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
MAX_HOSTNAME = 253
# Path characters that need no quoting anywhere (a unit, `sh -c`, authorized_keys' command="...").
PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9._/+-]+$")
PLACEHOLDER = "replace the example's placeholder (all zeros) with"


def plain(value: str, name: str = "") -> str:
    """One line of text: a newline or control character would start a new unit directive or command.

    `name` says which entry of a mapping (a flag, a variable) holds the value."""
    found = CONTROL_CHARACTERS.search(value)
    if found:
        raise ValueError(f"{name + ': ' if name else ''}{value!r} contains a line break or control character "
                         f"({found.group()!r}): give one line of plain text")
    return value


def environment(value: dict[str, str], names: re.Pattern, expected: str) -> dict[str, str]:
    """Variables for a process: each name matching `names` (else: "NAME is not `expected`"), each value one line."""
    for name, setting in value.items():
        if not names.fullmatch(name):
            raise ValueError(f"{name!r} is not {expected}")
        plain(setting, name)
    return value


def http_url(value: str) -> str:
    """An http(s) URL whose characters are inert wherever a deploy writes it (apt sources, pip's options)."""
    if not HTTP_URL.fullmatch(value):
        raise ValueError(f"{value!r} is not an http(s) URL like 'https://mirror.example.com/path/' (letters, "
                         "digits and -._~%/+=:@, only: no spaces, quotes, query string or credentials)")
    return value


def network_address(value: str) -> str:
    """A hostname or IP address, as ssh and rsync take it."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if (len(value) > MAX_HOSTNAME or not all(HOSTNAME_LABEL.fullmatch(label) for label in labels)
            or labels[-1].isdigit()):
        raise ValueError(f"{value!r} is not a hostname or an IP address (like 'gpu-01.example.com' or '10.0.0.7')")
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
