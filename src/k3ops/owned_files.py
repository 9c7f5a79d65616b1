"""The one way k3ops replaces a file on a host, from a deploy or a command: as the file's owner, by rename.

The new file is written by its owner (root, or through `runuser` one of the users k3ops makes), so root
never writes, chmods or chowns through a path in a directory another user can write. It is a new file
renamed over the old (`mv -T`): a link planted where the file goes is replaced, not followed, and a reader
sees the old file or the new one, never half. It is private (umask 077) from its first byte until it has
its mode.
"""

from __future__ import annotations

import shlex

# $1: the path, $2: its mode; the content comes on standard input.
REPLACE_SCRIPT = ('umask 077 && mkdir -p -- "$(dirname -- "$1")" && rm -f -- "$1.k3ops-new" && cat > "$1.k3ops-new" '
                  '&& chmod "$2" "$1.k3ops-new" && mv -fT -- "$1.k3ops-new" "$1"')


def replace_command(path: str, mode: str, owner: str = "root") -> str:
    """A command that replaces `path` with its standard input, written as `owner`."""
    words = ["sh", "-c", REPLACE_SCRIPT, "sh", path, mode]
    return shlex.join(["runuser", "-u", owner, "--", *words] if owner != "root" else words)


def replace_with(path: str, content: str, mode: str, owner: str = "root") -> str:
    """The same with `content` in the command itself: for text that is no secret (a secret never goes on a
    command line: k3ops.operations.owned_files stages it in a root-only directory)."""
    return f"printf '%s' {shlex.quote(content)} | {replace_command(path, mode, owner)}"
