"""Facts about how the host boots: Secure Boot, the kernel command line and GRUB's defaults."""

from __future__ import annotations

import re
import shlex

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

from .util import kernel_words

GRUB_DEFAULTS = "/etc/default/grub"
SECURE_BOOT_STATE_REGEX = r"^SecureBoot (enabled|disabled)$"
GRUB_COMMAND_LINE_REGEX = r"^(?P<variable>GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(?P<value>.*)$"


class SecureBoot(FactBase[bool | None]):
    """
    Returns whether Secure Boot is enforced, ``None`` when the host cannot tell (no mokutil, no EFI):

    .. code:: python

        True
    """

    # mokutil exits non-zero on hosts without EFI variables or Secure Boot support.
    command = "mokutil --sb-state 2>&1 || true"

    @override
    def requires_command(self) -> str:
        return "mokutil"

    @override
    def process(self, output):
        for line in output:
            state = re.match(SECURE_BOOT_STATE_REGEX, line.strip())
            if state:
                return state.group(1) == "enabled"
        return None


class KernelCommandLine(FactBase[list[str]]):
    """
    Returns the words of the running kernel's command line:

    .. code:: python

        ["BOOT_IMAGE=/boot/vmlinuz-6.8.0-60-generic", "root=UUID=1c7e6f9a", "ro", "iommu=pt"]
    """

    command = "cat /proc/cmdline"

    default = list

    @override
    def process(self, output):
        return kernel_words(" ".join(output))


class GrubDefaultCommandLine(FactBase[dict[str, list[str]]]):
    """
    Returns the kernel arguments /etc/default/grub gives every boot entry (GRUB_CMDLINE_LINUX)
    and the default entry (GRUB_CMDLINE_LINUX_DEFAULT); a variable the file does not set is absent:

    .. code:: python

        {"GRUB_CMDLINE_LINUX_DEFAULT": ["quiet", "iommu=pt"], "GRUB_CMDLINE_LINUX": []}
    """

    command = f"grep -s -E '^GRUB_CMDLINE_LINUX(_DEFAULT)?=' {GRUB_DEFAULTS} || true"

    default = dict

    @override
    def process(self, output):
        variables = {}
        for line in output:
            assignment = re.match(GRUB_COMMAND_LINE_REGEX, line.strip())
            if assignment:
                try:
                    value = " ".join(shlex.split(assignment["value"], comments=True))
                except ValueError as error:
                    raise FactProcessError(f"{GRUB_DEFAULTS}: cannot read the line {line!r} ({error})") from error
                # The shell keeps the last assignment, and so does grub-mkconfig.
                variables[assignment["variable"]] = kernel_words(value)
        return variables
