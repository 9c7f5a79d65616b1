"""Parsing shared by k3ops facts."""

from __future__ import annotations

import json
import re

from pyinfra.api.exceptions import FactProcessError

# The kernel splits its command line at spaces outside double quotes (lib/cmdline.c, next_arg).
KERNEL_WORD_REGEX = r'(?:[^\s"]|"[^"]*")+'


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
