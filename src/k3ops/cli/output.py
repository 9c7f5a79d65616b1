"""How every command prints per-host results: a padded table for people, JSON (`--json`) for tools,
and each host that could not answer on stderr, by name."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

# A column: its header, and how a row shows in it.
Column = tuple[str, Callable[[dict], object]]


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def add_limit_flag(parser, default: str) -> None:
    """--limit as pyinfra's, kept as given: an empty one reaches k3ops.inventory.selected, which refuses it
    (argparse's own refusal would print the usage and exit 2, not the doctor's 3)."""
    parser.add_argument("--limit", action="append", metavar="HOSTS",
                        help="host names, group names or globs of host names, as pyinfra's --limit; repeat it or "
                             f"separate them with commas (default: {default})")


def add_inventory_command(commands, name: str, handler, help_text: str, rows: bool = False):
    """A command over an inventory's hosts (`rows`: it prints a row per host, or JSON with --json)."""
    command = commands.add_parser(name, help=help_text)
    command.add_argument("inventory")
    if rows:
        add_json_flag(command)
    command.set_defaults(handler=handler)
    return command


def table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = [tuple(header), *rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)


def print_rows(rows: list[dict], columns: Sequence[Column], as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(rows, indent=1))
    else:
        print(table([name for name, _ in columns], [[show(row) for _, show in columns] for row in rows]))


def print_failures(failures: list[tuple[str, str]]) -> int:
    """`host: why` for each host that failed; the command's exit status (1 when any did)."""
    for host, why in failures:
        print(f"{host}: {why}", file=sys.stderr)
    return 1 if failures else 0


def print_results(results, columns: Sequence[Column], as_json: bool = False) -> int:
    """Rows of the hosts that answered (`result.value`, a dict), then the failures; the exit status."""
    print_rows([{"host": result.host, **result.value} for result in results if result.error is None], columns,
               as_json)
    return print_failures([(result.host, result.error) for result in results if result.error is not None])


def print_messages(results) -> int:
    """`host: message` for each host (a command's outcome), failures on stderr; the exit status."""
    for result in results:
        if result.error is None:
            print(f"{result.host}: {result.value}")
    return print_failures([(result.host, result.error) for result in results if result.error is not None])
