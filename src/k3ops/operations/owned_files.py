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

from k3ops.facts.owned_files import OwnedDirectory, OwnedFile, PrivateDirectory
from k3ops.onhost.layout import STATE_DIR, UPLOAD_DIR
from k3ops.owned_files import replace_command


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

    wanted = {"owner": owner, "group": owner, "mode": mode, "sha256": hashlib.sha256(content.encode()).hexdigest()}
    if host.get_fact(OwnedFile, path=path) == wanted:
        host.noop(f"{path} is up to date")
        return
    staged = yield from staged_upload(StringIO(content), path)
    yield f"{replace_command(path, mode, owner)} < {staged}; status=$?; rm -f {staged}; exit $status"


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
    for a link.

    + path: the directory
    + owner: who makes and owns it
    + mode: its mode

    **Example:**

    .. code:: python

        owned_files.directory(path="/var/lib/k3ops/engine/cache", owner="k3ops", mode="755")
    """

    if host.get_fact(OwnedDirectory, path=path) == {"owner": owner, "group": owner, "mode": mode}:
        host.noop(f"{path} is up to date")
        return
    make = shlex.join(["sh", "-c", 'mkdir -p -- "$1" && chmod "$2" -- "$1"', "sh", path, mode])
    yield f"runuser -u {shlex.quote(owner)} -- {make}" if owner != "root" else make


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

    if host.get_fact(PrivateDirectory, path=path, _sudo=False):
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

    links = host.get_fact(FindLinks, path=path, maxdepth=1) or []
    if not links:
        host.noop(f"no link in {path}")
        return
    yield shlex.join(["rm", "-f", "--", *sorted(links)])
