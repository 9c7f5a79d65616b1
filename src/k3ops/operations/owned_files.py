"""Files and directories that belong to root or to a user k3ops made, written the one safe way (k3ops.owned_files).

pyinfra's files.put and files.directory write as the SSH user and chown afterwards: in a directory another
user can write, that follows a link the user planted (root then writes or chowns its target), and --diff
prints the content. These write as the owner, by rename, and never show the content.
"""

from __future__ import annotations

import hashlib
import shlex
from io import StringIO
from typing import IO

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.facts.files import FindLinks
from pyinfra.operations import files

from k3ops.facts.memo import remembered
from k3ops.facts.owned_files import ConfigFiles, OwnedDirectory, OwnedFile, PrivateDirectory
from k3ops.onhost.layout import STATE_DIR, UPLOAD_DIR
from k3ops.owned_files import replace_command, replace_with


def found_file(path: str) -> dict | None:
    """The file at `path` as `OwnedFile` returns it; k3ops' files under /etc are read together (`ConfigFiles`)."""
    if ConfigFiles.lists(path):
        return remembered(ConfigFiles).get(path)
    return remembered(OwnedFile, path=path)


@operation()
def file(path: str, content: str, owner: str = "root", mode: str = "600"):
    """
    A file written by ``owner`` (root, or a user k3ops made, with a group of its name), by rename; its
    content, a key or a token, is never shown in a diff or a log, and is staged in a root-only directory.

    + path: where the file goes
    + content: what it holds
    + owner: who writes and owns it
    + mode: its mode, e.g. ``"600"``

    **Example:**

    .. code:: python

        owned_files.file(path="/var/lib/k3ops/home/k3ops-nccl/.ssh/id_ed25519", content=key,
                         owner="k3ops-nccl", mode="600")
    """

    if up_to_date(path, content, owner, mode):
        return
    staged = yield from staged_upload(StringIO(content), path)
    yield f"{replace_command(path, mode, owner)} < {staged}; status=$?; rm -f {staged}; exit $status"


@operation()
def config_file(path: str, content: str, mode: str = "644"):
    """
    A file of root's that holds no secret (an apt source, a unit, a module list), written by rename like
    `file`, its content on the command line: one command, nothing staged.

    + path: where the file goes
    + content: what it holds
    + mode: its mode, e.g. ``"644"``

    **Example:**

    .. code:: python

        owned_files.config_file(path="/etc/modules-load.d/k3ops-nvidia-peermem.conf", content="nvidia-peermem\\n")
    """

    if not up_to_date(path, content, "root", mode):
        yield replace_with(path, content, mode)


@operation()
def downloaded(src: str, path: str, mode: str = "644"):
    """
    A file of root's downloaded once by the host itself (``files.download``), asked about through
    `found_file`: an apt repository's signing key, say.

    + src: the URL
    + path: where the file goes
    + mode: its mode

    **Example:**

    .. code:: python

        owned_files.downloaded(src="https://example.com/key.asc", path="/etc/apt/keyrings/k3ops-example.asc")
    """

    found = found_file(path)
    if found is not None and (found["owner"], found["group"], found["mode"]) == ("root", "root", mode):
        host.noop(f"{path} is downloaded")
        return
    yield from files.download._inner(src=src, dest=path, mode=mode)


def up_to_date(path: str, content: str, owner: str, mode: str) -> bool:
    wanted = {"owner": owner, "group": owner, "mode": mode, "sha256": hashlib.sha256(content.encode()).hexdigest()}
    if found_file(path) != wanted:
        return False
    host.noop(f"{path} is up to date")
    return True


def staged_upload(content: IO, destination: str):
    """The commands that upload ``content`` to root's 0700 staging directory, under a name of its
    ``destination``; returns the staged path, which the caller's next command consumes and removes."""
    staged = f"{UPLOAD_DIR}/{hashlib.sha256(destination.encode()).hexdigest()[:32]}"
    yield f"install -d -o root -g root -m 755 {STATE_DIR} && install -d -o root -g root -m 700 {UPLOAD_DIR}"
    staging = (host.current_op_global_arguments or {}).get("_temp_dir")  # where pyinfra stages under sudo
    yield FileUploadCommand(content, staged,
                            remote_temp_filename=host.get_temp_filename(staged, temp_directory=staging))
    return staged


@operation()
def directory(path: str, owner: str, mode: str = "755"):
    """
    A directory made by ``owner`` itself, so that root never chowns a path its owner could have swapped
    for a link; one of root's is made, or taken back from an earlier owner, by ``install -d``.

    + path: the directory
    + owner: who makes and owns it
    + mode: its mode

    **Example:**

    .. code:: python

        owned_files.directory(path="/var/lib/k3ops/engine/cache", owner="k3ops", mode="755")
    """

    if remembered(OwnedDirectory, path=path) == {"owner": owner, "group": owner, "mode": mode}:
        host.noop(f"{path} is up to date")
        return
    if owner == "root":  # root's own directory, in a directory of root's: taken back from an earlier owner
        yield shlex.join(["install", "-d", "-o", "root", "-g", "root", "-m", mode, "--", path])
        return
    make = shlex.join(["sh", "-c", 'mkdir -p -- "$1" && chmod "$2" -- "$1"', "sh", path, mode])
    yield f"runuser -u {shlex.quote(owner)} -- {make}"


@operation()
def staging_directory(path: str):
    """
    The SSH user's own 0700 directory where pyinfra stages uploads and downloads (``config.TEMP_DIR``),
    made by that user, not through sudo: under sudo pyinfra uploads as the user, then copies as root.

    + path: the directory, relative to the SSH user's home

    **Example:**

    .. code:: python

        owned_files.staging_directory(path=".cache/k3ops-staging")
    """

    if remembered(PrivateDirectory, path=path, _sudo=False):
        host.noop(f"~/{path} is the SSH user's own")
        return
    directory = shlex.quote(path)
    yield StringCommand(f"umask 077 && {{ [ ! -L {directory} ] || rm -f {directory}; }} && mkdir -p {directory} "
                        f"&& chmod 700 {directory}", _sudo=False)


@operation()
def no_links(path: str):
    """
    No link directly in a directory of root's that k3ops never puts one in: one left by a user who owned the
    directory before (the default service user's home was k3ops's state directory) is removed, never followed.

    + path: the directory

    **Example:**

    .. code:: python

        owned_files.no_links(path="/var/lib/k3ops")
    """

    links = remembered(FindLinks, path=path, maxdepth=1) or []
    if not links:
        host.noop(f"no link in {path}")
        return
    yield shlex.join(["rm", "-f", "--", *sorted(links)])
