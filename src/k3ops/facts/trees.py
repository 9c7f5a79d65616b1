"""A directory tree's files and their digests, read in one command (k3ops.operations.trees)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase
from typing_extensions import override

# Python's caches, which the host writes beside the code it runs, are no part of the tree.
CACHE_FILES = ("-name", "*.pyc", "-o", "-path", "*/__pycache__/*")


class TreeDigests(FactBase[dict | None]):
    """
    Returns each regular file under a directory by its path relative to it, with its sha256 (``None`` for
    anything that is neither a file nor a directory, a link included); ``None`` when the directory is not
    there or is a link:

    .. code:: python

        {"__init__.py": "e3b0c442...", "checkpoint/store.py": "9f86d081..."}
    """

    @override
    def command(self, path: str):
        tree = shlex.quote(path)
        caches = shlex.join(["(", *CACHE_FILES, ")"])
        return (f"if [ -d {tree} ] && ! [ -L {tree} ]; then cd {tree} && echo tree && "
                f"find . -mindepth 1 ! -type d ! -type f -printf 'other %p\\n' && "
                f"find . -type f ! {caches} -exec sha256sum {{}} +; fi; true")

    @override
    def process(self, output):
        lines = [line.rstrip("\n") for line in output if line.strip()]
        if not lines or lines[0].strip() != "tree":
            return None
        found = {}
        for line in lines[1:]:
            kind, _, path = line.partition(" ")
            found[path.lstrip(" *").removeprefix("./")] = None if kind == "other" else kind
        return found
