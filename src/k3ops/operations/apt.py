"""Hold apt packages at their installed version, or release them."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation

from k3ops.facts.apt import AptHeldPackages


@operation()
def held(packages: list[str], held: bool = True):
    """
    Hold packages so that upgrades leave them alone (``apt-mark hold``), or release them.

    + packages: names of the packages
    + held: whether the packages should be held

    **Example:**

    .. code:: python

        apt.held(
            name="Keep the NVIDIA driver at the pinned release",
            packages=["nvidia-driver", "nvidia-kernel-open-dkms"],
        )
    """

    currently_held = set(host.get_fact(AptHeldPackages))
    to_change = [package for package in packages if (package in currently_held) != held]
    if not to_change:
        host.noop(f"{', '.join(packages)} already {'held' if held else 'not held'}")
        return

    yield StringCommand("apt-mark", "hold" if held else "unhold", *(QuoteString(package) for package in to_change))
