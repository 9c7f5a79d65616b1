"""Plain-text tables for the status commands: one padded column per field."""

from __future__ import annotations


def render(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = [header, *rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
