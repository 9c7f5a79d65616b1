"""Running a fact's command against a simulated tool."""

import shlex


def tool_arguments(fact) -> list[str]:
    """The arguments a fact's command gives its tool, without the redirection and guard after them."""
    words = shlex.split(fact.command)
    return [word for word in words[1:words.index("||") if "||" in words else None] if word != "2>&1"]
