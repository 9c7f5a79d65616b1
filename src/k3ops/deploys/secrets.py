"""Secrets on a host (the Hub token, the engine's API key): root-only from their first byte.

They live in a root 0700 directory and are uploaded into it too, so neither the upload nor the file
before its chmod is ever readable by another user; systemd (root) reads them for the units.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.operations import files

from ..onhost import layout


def secret_file(dest: str, content: str, what: str):
    """Write one secrets file under layout.SECRETS_DIR; returns the operation, for `_if` on its change."""
    files.directory(name=f"Directory {layout.CONFIG_DIR}", path=layout.CONFIG_DIR, mode="755")
    files.directory(name=f"Secrets directory {layout.SECRETS_DIR} (root only)", path=layout.SECRETS_DIR,
                    user="root", group="root", mode="700")
    return files.put(name=f"{what} in {dest}", src=StringIO(content), dest=dest, user="root", group="root",
                     mode="600", _temp_dir=layout.SECRETS_DIR)
