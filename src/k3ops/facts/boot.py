"""Facts about how the host boots: Secure Boot, the kernel command line and GRUB's defaults."""

from __future__ import annotations

import re
import shlex

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

from .util import kernel_words

GRUB_DEFAULTS = "/etc/default/grub"
EFI_GLOBAL_VARIABLE = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFIVARFS_SECURE_BOOT = f"/sys/firmware/efi/efivars/SecureBoot-{EFI_GLOBAL_VARIABLE}"
SYSFS_SECURE_BOOT = f"/sys/firmware/efi/vars/SecureBoot-{EFI_GLOBAL_VARIABLE}/data"
GRUB_COMMAND_LINE_REGEX = r"^(?P<variable>GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(?P<value>.*)$"


class SecureBoot(FactBase[bool | None]):
    """
    Returns whether Secure Boot is enforced, read from the firmware's SecureBoot variable itself
    (efivarfs, or the older sysfs interface), so it needs no tool a deploy has yet to install;
    ``None`` when the host has no such variable (legacy BIOS boot, no EFI):

    .. code:: python

        True
    """

    # efivarfs prefixes a variable's data with its 4 attribute bytes; the sysfs interface's data has none.
    command = (f"if [ -r {EFIVARFS_SECURE_BOOT} ]; then od -An -tu1 -j4 -N1 {EFIVARFS_SECURE_BOOT}; "
               f"elif [ -r {SYSFS_SECURE_BOOT} ]; then od -An -tu1 -N1 {SYSFS_SECURE_BOOT}; fi")

    @override
    def process(self, output):
        value = " ".join(output).strip()
        if not value:
            return None
        if not value.isdigit():
            raise FactProcessError(f"the SecureBoot EFI variable reads {value!r}, not a byte")
        return value != "0"


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


class BootId(FactBase[str]):
    """
    Returns the kernel's random id of the running boot: a new one proves the host rebooted (uptime can
    mislead, a host that answered SSH again may not have gone down at all):

    .. code:: python

        "9a1c3f0e-4b7d-4c1a-8f53-0e6d2b9c7a11"
    """

    command = "cat /proc/sys/kernel/random/boot_id"

    @override
    def process(self, output):
        value = " ".join(output).strip()
        if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", value):
            raise FactProcessError(f"the boot id reads {value!r}, not a UUID")
        return value
