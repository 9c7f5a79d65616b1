"""`k3ops validate INVENTORY`: every host's data checked against the specs, no host contacted."""

from __future__ import annotations

import sys


def register(verbs) -> None:
    validate = verbs.add_parser("validate", help="check an inventory's host data without connecting")
    validate.add_argument("inventory")
    validate.set_defaults(handler=run)


def run(args) -> int:
    from pyinfra.api.exceptions import InventoryError

    from ..inventory import BadInput, defined_groups, inventory_errors, load

    try:
        errors = inventory_errors(load(args.inventory), defined_groups(args.inventory))
    except BadInput:
        raise  # no data to judge: bad input, as for every verb
    except InventoryError as error:  # an inventory that validates itself: its hosts' errors
        errors = [str(error)]
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"{args.inventory}: every host's data is valid")
    return 0
