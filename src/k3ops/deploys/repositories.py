"""Vendor apt repositories, each trusted through its own signed-by keyring."""

from __future__ import annotations

from ..operations import owned_files
from ..settings.host import Repository

KEYRING_DIR = "/etc/apt/keyrings"


def source_line(name: str, repository: Repository) -> str:
    """The one-line apt source: flat (`URL /`) or by suite (`URL noble main`), signed by its own key only."""
    where = f"{repository.url} {repository.suite} {repository.component}" if repository.suite else f"{repository.url} /"
    return f"deb [signed-by={KEYRING_DIR}/k3ops-{name}.asc] {where}"


def signed_repository(name: str, repository: Repository) -> list:
    """Install the repository's key and source; returns the operations, for `_if` on their change."""
    key = owned_files.downloaded(name=f"Fetch the {name} repository signing key", src=repository.key_url,
                                 path=f"{KEYRING_DIR}/k3ops-{name}.asc")
    # The whole file is ours: a new URL (another ROCm release, a site mirror) replaces the old line.
    source = owned_files.config_file(name=f"Add the {name} repository",
                                     path=f"/etc/apt/sources.list.d/k3ops-{name}.list",
                                     content=source_line(name, repository) + "\n")
    return [key, source]
