"""Facts about the kernel: its loaded modules and the kernels installed beside the running one."""

from __future__ import annotations

import re

from pyinfra.api import FactBase
from typing_extensions import override

MODULE_NAME_REGEX = r"^[A-Za-z0-9_-]+$"
# `dpkg-query` lines of installed kernel images: a release (linux-image-6.1.0-28-amd64, Ubuntu's
# linux-image-unsigned-6.8.0-45-generic) or a flavour's metapackage, which follows the newest release
# (Debian's linux-image-amd64, linux-image-cloud-amd64; Ubuntu's linux-image-generic).
KERNEL_IMAGE_REGEX = r"^ii\s+linux-image-(?:unsigned-)?(?P<name>\S+)$"


class KernelModuleLoaded(FactBase[bool]):
    """
    Returns whether a loadable kernel module is loaded (its /sys/module entry has an initstate; a
    module built into the kernel has none), read from sysfs so that it needs no tool:

    .. code:: python

        True
    """

    @override
    def command(self, module: str):
        if not re.match(MODULE_NAME_REGEX, module):
            raise ValueError(f"{module!r} is not a kernel module name")
        # The kernel shows dashes in module names as underscores (nvidia-peermem is nvidia_peermem).
        return f"cat /sys/module/{module.replace('-', '_')}/initstate 2>/dev/null || true"

    @override
    def process(self, output):
        return any(line.strip() == "live" for line in output)


class InstalledKernels(FactBase[dict[str, list[str]]]):
    """
    Returns the kernel releases installed as packages and the flavours whose metapackage is installed
    (each brings the newest release of its flavour at an upgrade):

    .. code:: python

        {"releases": ["6.1.0-27-amd64", "6.1.0-28-amd64"], "flavours": ["amd64"]}
    """

    command = ("dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n' 'linux-image-*' 2>/dev/null "
               "| sed 's/ *$//' || true")

    @staticmethod
    def default():
        return {"releases": [], "flavours": []}

    @override
    def process(self, output):
        names = [match["name"] for line in output if (match := re.match(KERNEL_IMAGE_REGEX, line.strip()))]
        return {"releases": sorted(name for name in names if name[:1].isdigit()),
                "flavours": sorted(name for name in names if not name[:1].isdigit())}
