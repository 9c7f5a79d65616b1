"""Secrets on a host (the Hub token, the engine's API key): root-only from their first byte, never in a diff.

They live in a root 0700 directory; systemd (root) reads them for the units. They are staged in a root-only
directory and written by rename (k3ops.operations.owned_files), so neither the upload nor the file before
its chmod is ever readable by another user, and `pyinfra --diff` has no content of theirs to print.
"""

from __future__ import annotations

from pyinfra.operations import files

from ..onhost import layout
from ..operations import owned_files
from .onhost import config_directory


def secret_file(dest: str, content: str, what: str):
    """Write one secrets file under layout.SECRETS_DIR; returns the operation, for `_if` on its change."""
    config_directory()
    files.directory(name=f"Secrets directory {layout.SECRETS_DIR} (root only)", path=layout.SECRETS_DIR,
                    user="root", group="root", mode="700")
    return owned_files.file(name=f"{what} in {dest}", path=dest, content=content, owner="root", mode="600")
