"""Kernel arguments of the default boot entry."""

from __future__ import annotations

import re

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.facts.server import Which
from pyinfra.operations import files

from k3ops.facts.boot import GRUB_DEFAULTS, GrubDefaultCommandLine

GRUB_DEFAULT_VARIABLE = "GRUB_CMDLINE_LINUX_DEFAULT"
# One word that can sit inside the variable's double quotes unchanged.
KERNEL_ARGUMENT_REGEX = r"^[^\s\"'$`\\]+$"


@operation()
def boot_argument(argument: str, present: bool = True):
    """
    Add a kernel argument to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, or remove it, and
    regenerate GRUB's config where the host has ``update-grub``. It takes effect at the next boot:
    reboot when this changes.

    + argument: one kernel command line word, like ``iommu=pt``
    + present: whether the argument should be there

    **Example:**

    .. code:: python

        iommu = kernel.boot_argument(name="Pass GPUs through the IOMMU", argument="iommu=pt")
        server.reboot(name="Boot with the new arguments", _if=iommu.did_change)
    """

    if not re.match(KERNEL_ARGUMENT_REGEX, argument):
        raise OperationError(
            f"boot_argument: {argument!r} is not one kernel argument (no spaces, quotes, $, ` or \\)",
        )

    words = list(host.get_fact(GrubDefaultCommandLine).get(GRUB_DEFAULT_VARIABLE, []))
    if (argument in words) == present:
        host.noop(f"{argument} {'already' if present else 'not'} in {GRUB_DEFAULT_VARIABLE}")
        return

    wanted = words + [argument] if present else [word for word in words if word != argument]
    yield from files.line._inner(
        path=GRUB_DEFAULTS,
        line=f"^{GRUB_DEFAULT_VARIABLE}=.*$",
        replace=f'{GRUB_DEFAULT_VARIABLE}="{" ".join(wanted)}"',
    )
    if host.get_fact(Which, command="update-grub"):
        yield "update-grub"
