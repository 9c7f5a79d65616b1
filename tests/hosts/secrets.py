"""For host checks that guard a secret: a failure names where the secret showed, never the secret, so that a
failing check's output (pytest prints an assertion's values) can be pasted into a ticket."""

from __future__ import annotations


def secret_values(host, path: str) -> list[str]:
    """The values of an environment file's `NAME=value` lines (read as root)."""
    return [line.split("=", 1)[1] for line in host.check_output(f"cat {path}").splitlines() if "=" in line]


def shown_nowhere(secrets: list[str], places: dict[str, str]) -> None:
    """Fails, naming the place, when a secret appears in one of `places` (name -> text). Its own frame, whose
    arguments pytest would print, is hidden from the failure's traceback."""
    __tracebackhide__ = True
    for where, text in places.items():
        leaked = any(secret and secret in text for secret in secrets)
        assert not leaked, f"a secret appears in {where}"
