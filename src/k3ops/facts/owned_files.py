"""Files and directories k3ops writes as their owner (k3ops.owned_files): who owns one, its mode and digest, without
following a link."""

from __future__ import annotations

import re

from pyinfra.api import FactBase, QuoteString, StringCommand
from typing_extensions import override

STAT_LINE = re.compile(r"^(?P<owner>\S+) (?P<group>\S+) (?P<mode>[0-7]+)$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
CONFIG_ROOT = "/etc"
CONFIG_STAT_MARK = "k3ops-stat"


def unless_a_link(kind: str, path: str, *then) -> StringCommand:
    """`then`, when `path` is a `kind` (`-f` a regular file, `-d` a directory) and not a link to one; the fact
    says what it found in its output, never by failing."""
    return StringCommand("if", "[", kind, QuoteString(path), "]", "&&", "!", "[", "-L", QuoteString(path), "];",
                         "then", *then, ";", "fi", ";", "true")


def stat_line(path: str) -> list:
    return ["stat", "-c", QuoteString("%U %G %a"), "--", QuoteString(path)]


class OwnedFile(FactBase[dict | None]):
    """
    Returns a regular file's owner, group, mode and sha256; ``None`` when there is none, or a link or
    anything else is there instead (which k3ops replaces rather than follows):

    .. code:: python

        {"owner": "k3ops-nccl", "group": "k3ops-nccl", "mode": "600", "sha256": "9f86d081..."}
    """

    @override
    def command(self, path: str):
        # stat, like [ -L ], does not follow a link; the digest is read only of a regular file.
        return unless_a_link("-f", path, *stat_line(path), "&&", "sha256sum", "<", QuoteString(path))

    @override
    def process(self, output):
        lines = [line.strip() for line in output if line.strip()]
        if len(lines) != 2:
            return None
        found, digest = STAT_LINE.match(lines[0]), lines[1].split()[0]
        if not found or not SHA256.match(digest):
            return None
        return {**found.groupdict(), "sha256": digest}


class ConfigFiles(FactBase[dict[str, dict]]):
    """
    Returns every regular file under /etc whose path names k3ops (``k3ops`` in a directory's name or its own:
    the apt sources, pins, units and settings k3ops writes) as `OwnedFile` returns one, by path, in one
    command; a link or anything else is left out:

    .. code:: python

        {"/etc/apt/sources.list.d/k3ops-cuda.list": {"owner": "root", "group": "root", "mode": "644",
                                                     "sha256": "9f86d081..."}}
    """

    # find neither follows a link nor lists one as a regular file.
    command = (f"find {CONFIG_ROOT} -path '*k3ops*' -type f -printf '{CONFIG_STAT_MARK} %u %g %m %p\\n' "
               "-exec sha256sum -- {} + || true")

    default = dict

    @staticmethod
    def lists(path: str) -> bool:
        """Whether `path` is one this fact reads (its command's `find` and `-path`)."""
        return path.startswith(f"{CONFIG_ROOT}/") and "k3ops" in path

    @override
    def process(self, output):
        stats, digests = {}, {}
        for line in output:
            if line.startswith(f"{CONFIG_STAT_MARK} "):
                owner, group, mode, path = line.split(" ", 4)[1:]
                stats[path] = {"owner": owner, "group": group, "mode": mode}
            elif SHA256.match(line[:64]) and line[64:66] == "  ":
                digests[line[66:]] = line[:64]
        return {path: {**found, "sha256": digests[path]} for path, found in stats.items() if path in digests}


class OwnedDirectory(FactBase[dict | None]):
    """
    Returns a directory's owner, group and mode; ``None`` when there is none, or a link is there:

    .. code:: python

        {"owner": "k3ops", "group": "k3ops", "mode": "755"}
    """

    @override
    def command(self, path: str):
        return unless_a_link("-d", path, *stat_line(path))

    @override
    def process(self, output):
        found = STAT_LINE.match("\n".join(output).strip())
        return found.groupdict() if found else None


class PrivateDirectory(FactBase[bool]):
    """
    Returns whether a directory is the asking user's own, mode 0700, and not a link.
    """

    @override
    def command(self, path: str):
        return unless_a_link("-d", path, "[", "-O", QuoteString(path), "]", "&&", "[", "\"$(stat -c %a",
                             QuoteString(path), ")\"", "=", "700", "]", "&&", "echo", "private")

    @override
    def process(self, output):
        return "\n".join(output).strip() == "private"
