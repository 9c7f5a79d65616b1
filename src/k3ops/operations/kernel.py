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
def boot_arguments(arguments: list[str], present: bool = True):
    """
    Add kernel arguments to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, or remove them, and
    regenerate GRUB's config where the host has ``update-grub``. They take effect at the next boot:
    reboot when this changes. One operation for all of a deploy's arguments: the line is rewritten
    whole, from the value read before the deploy ran.

    + arguments: kernel command line words, like ``iommu=pt``
    + present: whether the arguments should be there

    **Example:**

    .. code:: python

        iommu = kernel.boot_arguments(name="Pass GPUs through the IOMMU", arguments=["iommu=pt"])
        server.reboot(name="Boot with the new arguments", _if=iommu.did_change)
    """

    for argument in arguments:
        if not re.match(KERNEL_ARGUMENT_REGEX, argument):
            raise OperationError(
                f"boot_arguments: {argument!r} is not one kernel argument (no spaces, quotes, $, ` or \\)",
            )

    words = list(host.get_fact(GrubDefaultCommandLine).get(GRUB_DEFAULT_VARIABLE, []))
    if all((argument in words) == present for argument in arguments):
        host.noop(f"{' '.join(arguments)} {'already' if present else 'not'} in {GRUB_DEFAULT_VARIABLE}")
        return

    wanted = (words + [argument for argument in arguments if argument not in words] if present
              else [word for word in words if word not in arguments])
    yield from files.line._inner(
        path=GRUB_DEFAULTS,
        line=f"^{GRUB_DEFAULT_VARIABLE}=.*$",
        replace=f'{GRUB_DEFAULT_VARIABLE}="{" ".join(wanted)}"',
    )
    if host.get_fact(Which, command="update-grub"):
        yield "update-grub"
