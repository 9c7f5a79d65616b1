"""k3ops' own host-side code (k3ops.onhost) on a host, and the commands that run it there."""

from __future__ import annotations

from pathlib import Path

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
