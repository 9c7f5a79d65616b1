"""Files on the controller that inventory data names: checked before any host is touched, and read by the
deploy through the same functions, so what was checked is what is sent.

The deploy copies them to every host as secrets, so each must be the controller user's own: a regular file
(not a link another user could point elsewhere), mode 0600, in a directory only that user can write. The
fleet keys must be the ones k3ops made (`ssh-keygen -C <its name>`), never an operator's own private key;
the API key is one line, since it lands as `NAME=value` in the environment file root's units load.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import subprocess
from pathlib import Path

from ..onhost import layout
from ..forms import ssh_public_key

# An API key: one line of token characters (openssl rand -hex / -base64, uuid, sk-...), nothing a shell or
# an environment file would read specially.
API_KEY = re.compile(r"^[A-Za-z0-9._~+/=_-]{16,512}$")
MAKE_API_KEY = "(umask 077; mkdir -p {dir} && openssl rand -hex 32 > {path})"
# Inventory fields naming a fleet key, and the comment k3ops gives the key it makes there.
FLEET_KEYS = {"model_peer_key": layout.PEER_KEY_NAME, "nccl_mpi_key": layout.NCCL_KEY_NAME}


class ControllerFileError(ValueError):
    """A controller file that must not be sent: the message says what is wrong and how to fix it."""


def own_file(path: str) -> Path:
    """The file at `path` (`~` expanded) if it is a regular file, not a link, the controller user's alone
    (mode 0600 or stricter) in a directory no other user can write."""
    where = Path(path).expanduser()
    try:
        found = where.lstat()
        parent = where.parent.stat()
    except FileNotFoundError:
        raise ControllerFileError(f"{path} does not exist on this controller") from None
    except OSError as error:
        raise ControllerFileError(f"cannot read {path} on this controller: {error.strerror}") from None
    if stat.S_ISLNK(found.st_mode):
        raise ControllerFileError(f"{path} is a symbolic link; name the file itself (a link can be pointed "
                                  "at another file after this check)")
    if not stat.S_ISREG(found.st_mode):
        raise ControllerFileError(f"{path} is not a regular file")
    if found.st_uid != os.getuid():
        raise ControllerFileError(f"{path} belongs to uid {found.st_uid}, not to this user (uid {os.getuid()})")
    if found.st_mode & 0o077:
        raise ControllerFileError(f"{path} is open to group or others (mode {stat.S_IMODE(found.st_mode):04o}); "
                                  f"keep the key its owner's alone: `chmod 600 {path}`")
    if parent.st_mode & 0o022 or parent.st_uid not in (0, os.getuid()):
        raise ControllerFileError(f"{path} is in {where.parent}, which another user can write (mode "
                                  f"{stat.S_IMODE(parent.st_mode):04o}, uid {parent.st_uid}); keep it in a "
                                  "directory of your own")
    return where


def read_api_key(path: str) -> str:
    """The API key in the file at `path`: one line of token characters, read without following a link."""
    where = own_file(path)
    descriptor = os.open(where, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor) as opened:
        text = opened.read(4096)
    lines = text.splitlines()
    if len(lines) != 1 or not API_KEY.fullmatch(lines[0]):
        raise ControllerFileError(f"{path} is not one line of 16 to 512 key characters (letters, digits and "
                                  f"._~+/=_-); make one with `{MAKE_API_KEY.format(dir=where.parent, path=path)}`")
    return lines[0]


def fleet_public_key(path: str, comment: str) -> str:
    """The public key of the fleet key at `path`, if it is one k3ops made: its `.pub` (comment `comment`)
    is the private key's own, both the controller user's alone."""
    where = own_file(path)
    public = where.with_suffix(".pub")
    try:
        stamps = (where.stat().st_mtime_ns, public.lstat().st_mtime_ns)
    except OSError as error:
        raise ControllerFileError(f"cannot read {public}: {error.strerror}") from None
    return made_by_k3ops(where, comment, stamps)


@functools.lru_cache(maxsize=16)
def made_by_k3ops(where: Path, comment: str, _stamps: tuple[int, int]) -> str:
    """The `.pub` line of a key pair k3ops made, checked once per version of the pair (every host's
    validation asks)."""
    public = where.with_suffix(".pub")
    if public.is_symlink():
        raise ControllerFileError(f"{public} is a symbolic link; k3ops writes it as a file")
    try:
        line = ssh_public_key(public.read_text().strip())
    except ValueError as error:
        raise ControllerFileError(f"{public}: {error}") from None
    found = line.split(" ")
    if len(found) != 3 or found[2] != comment:
        raise ControllerFileError(f"{where} is not a key k3ops made (its .pub is not commented {comment!r}); "
                                  "name a path of its own, where k3ops makes the key when it is missing")
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(where)], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
    if derived.returncode != 0 or derived.stdout.split()[:2] != found[:2]:
        raise ControllerFileError(f"{public} is not the public half of {where}")
    return line


def controller_errors(data: dict) -> list[str]:
    """`field: message` for each file on this controller the host's data names."""
    errors = []
    engine = data.get("engine")
    path = engine.get("api_key_file") if isinstance(engine, dict) else None
    if isinstance(path, str) and path:
        try:
            read_api_key(path)
        except ControllerFileError as error:
            hint = MAKE_API_KEY.format(dir=os.path.dirname(path) or ".", path=path)
            errors.append(f"engine.api_key_file: {error}" + (f"; make one with `{hint}`"
                                                              if "does not exist" in str(error) else ""))
    for field, comment in FLEET_KEYS.items():
        path = data.get(field)
        if isinstance(path, str) and os.path.lexists(Path(path).expanduser()):
            try:
                fleet_public_key(path, comment)
            except ControllerFileError as error:
                errors.append(f"{field}: {error}")
    return errors
