"""`python -m k3ops_onhost.checkpoint fetch|verify|rollback CONFIG` and `status CACHE_PATH` (JSON)."""

from __future__ import annotations

import argparse
import json
import sys

from .fetch import FetchConfig, fetch, rollback, status, verify_active


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="k3ops-checkpoint")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("fetch", "verify", "rollback"):
        commands.add_parser(name).add_argument("config")
    commands.add_parser("status").add_argument("cache_path")
    arguments = parser.parse_args(argv)
    if arguments.command == "status":
        print(json.dumps(status(arguments.cache_path), indent=1, sort_keys=True))
        return 0
    config = FetchConfig.load(arguments.config)
    try:
        if arguments.command == "fetch":
            fetch(config)
        elif arguments.command == "verify":
            return 1 if verify_active(config) else 0
        else:
            print(f"{config.name}: active revision is now {rollback(config)}")
    except Exception as error:  # the journal gets one line saying what failed, not a traceback
        print(f"{config.name}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
