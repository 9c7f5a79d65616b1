"""k3ops' own host-side code (k3ops.onhost) on a host, its configuration directory, and the commands that run it there."""

from __future__ import annotations

from pathlib import Path

from pyinfra.operations import files

from .. import onhost
from ..onhost import layout
from ..operations import owned_files, trees
from . import rendered


def onhost_package() -> None:
    """The package, copied whole: the checkpoint store and the watchdog import its layout."""
    trees.copied(name=f"Install k3ops' host-side package ({layout.ONHOST_PACKAGE})",
                 src=str(Path(onhost.__file__).parent), dest=f"{layout.LIBRARY}/{layout.ONHOST_PACKAGE}")


def onhost_command(path: str, template: str):
    """A launcher for one of the package's entry points."""
    return owned_files.config_file(name=f"Command {path}", path=path, mode="755",
                                   content=rendered(f"k3ops/{template}", layout=layout))


def config_directory():
    """k3ops' configuration directory, readable by the users its services run as (the fetch reads models/ there),
    made before any file in it: a file's own write would make a missing parent root-only."""
    return files.directory(name=f"Directory {layout.CONFIG_DIR}", path=layout.CONFIG_DIR, mode="755")
