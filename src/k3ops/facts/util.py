"""Parsing shared by k3ops facts."""

from __future__ import annotations

import json
import re

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError
from typing_extensions import override

PCI_DEVICES = "/sys/bus/pci/devices"
PCI_BUS_ID_REGEX = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
# The kernel splits its command line at spaces outside double quotes (lib/cmdline.c, next_arg).
KERNEL_WORD_REGEX = r'(?:[^\s"]|"[^"]*")+'


class NvidiaSmiFact(FactBase[list[dict]]):
    """A fact that lists what nvidia-smi reports of each GPU. nvidia-smi exits non-zero when the driver is not
    usable, which is a state and not a failed host: the list is empty then (NvidiaDriverState says why), and on a
    host without nvidia-smi."""

    @override
    def requires_command(self, *args, **kwargs) -> str:
        return "nvidia-smi"

    default = list


def first_line(output: list[str]) -> str | None:
    """The first non-empty line of a fact's output, for files holding one value."""
    return next((line.strip() for line in output if line.strip()), None)


def kernel_words(command_line: str) -> list[str]:
    """A kernel command line split into its words, as the kernel splits it."""
    return re.findall(KERNEL_WORD_REGEX, command_line)


def json_document(output: list[str], what: str):
    """A fact's output read as one JSON document (``{}`` for none), or an error saying whose it was."""
    try:
        return json.loads("\n".join(output) or "{}")
    except json.JSONDecodeError as error:
        raise FactProcessError(f"{what} is not valid JSON ({error})") from error


def pci_functions_command(vendors: tuple[str, ...], classes: tuple[str, ...]) -> str:
    """A sysfs walk that prints the bus id of every PCI function of one of `vendors` (0x10de) whose class
    starts with one of `classes` (0x0680): it needs no tool a deploy has yet to install."""
    return (f"for device in {PCI_DEVICES}/*; do "
            f"case \"$(cat \"$device/vendor\")\" in {'|'.join(vendors)}) ;; *) continue;; esac; "
            f"case \"$(cat \"$device/class\")\" in {'|'.join(c + '*' for c in classes)}) "
            "echo \"${device##*/}\";; esac; done 2>/dev/null; true")


def pci_bus_ids(output: list[str]) -> list[str]:
    """The bus ids a `pci_functions_command` printed, sorted."""
    return sorted(line.strip() for line in output if re.match(PCI_BUS_ID_REGEX, line.strip()))
