"""A directory tree copied from the controller whole, asked about in one command: pyinfra's files.sync asks two
for every file (its stat and its sha1) on every run, 25 for k3ops' host-side package."""

from __future__ import annotations

import hashlib
import io
import shlex
import tarfile
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation

from k3ops.facts.memo import remembered
from k3ops.facts.trees import TreeDigests
from k3ops.operations.owned_files import staged_upload

# $1: the tree's path, $2: the staged archive. The new tree is unpacked beside the old and renamed over it, so
# a reader sees one tree or the other, and a link planted at the path is replaced, not followed.
REPLACE_TREE = ('rm -rf -- "$1.k3ops-new" "$1.k3ops-old" && mkdir -p -- "$1.k3ops-new" '
                '&& tar -xf "$2" --no-same-owner -C "$1.k3ops-new" '
                '&& { ! [ -e "$1" ] && ! [ -L "$1" ] || mv -fT -- "$1" "$1.k3ops-old"; } '
                '&& mv -fT -- "$1.k3ops-new" "$1" && rm -rf -- "$1.k3ops-old"')


def tree_files(src: Path) -> dict[str, bytes]:
    """The files of a tree on the controller by their relative paths, Python's caches left out."""
    return {path.relative_to(src).as_posix(): path.read_bytes() for path in sorted(src.rglob("*"))
            if path.is_file() and path.suffix != ".pyc" and "__pycache__" not in path.parts}


def archive(files: dict[str, bytes]) -> bytes:
    """A tar of the files, owned by root, readable by all."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size, member.mode = len(data), 0o644
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


@operation()
def copied(src: str, dest: str):
    """
    The tree at ``src`` on the controller at ``dest`` on the host, its files and nothing else (Python's
    caches aside), root's and readable by all; replaced whole, by one rename, when any file differs.

    + src: the directory on the controller
    + dest: where it goes on the host

    **Example:**

    .. code:: python

        trees.copied(src="src/k3ops/onhost", dest="/opt/k3ops/lib/k3ops_onhost")
    """

    files = tree_files(Path(src))
    wanted = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    if remembered(TreeDigests, path=dest) == wanted:
        host.noop(f"{dest} is up to date")
        return
    staged = yield from staged_upload(io.BytesIO(archive(files)), dest)
    yield f"{shlex.join(['sh', '-c', REPLACE_TREE, 'sh', dest, staged])}; status=$?; rm -f {staged}; exit $status"
