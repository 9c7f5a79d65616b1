"""Which host of a failed cluster test is at fault: rounds of pair tests run in parallel.

Bisection on pass/fail misses slow hosts and doubles its work when two bad hosts sit in different halves
(fleet-ops research B4). Instead each suspect is paired with a host already known to be good (ROCm CVS's
reference pairs); while there are not enough references, suspects are paired with each other, and a pair
that passes clears both and adds two references. Every round's pairs run at once, so with any reference
available a round settles every suspect, and a fleet with none needs one round more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MAX_ROUNDS = 4

Pair = tuple[str, str]


@dataclass
class Localization:
    at_fault: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)  # no reference left to tell them apart
    rounds: list[list[tuple[str, str, bool]]] = field(default_factory=list)  # each round's (a, b, passed)
    nic_loopback: list[tuple[str, bool]] = field(default_factory=list)  # hosts tested alone, when no pair could tell


def localize(suspects: list[str], references: list[str], run_pairs: Callable[[list[Pair]], list[bool]],
             failed: list[Pair] = (), max_rounds: int = MAX_ROUNDS) -> Localization:
    """Settle `suspects` with pair tests (`run_pairs` runs a round's pairs at once: passed or not, in order;
    `failed`: pairs already seen failing, not run again).

    A suspect that fails beside a good reference is at fault; one that passes is cleared (and becomes a
    reference itself)."""
    good, pending, found = list(references), list(suspects), Localization()
    tried = {frozenset(pair) for pair in failed}
    while pending and len(found.rounds) < max_rounds:
        pairs = round_pairs(pending, good, tried)
        if not pairs:
            break
        outcomes = list(zip(pairs, run_pairs(pairs), strict=True))
        found.rounds.append([(a, b, passed) for (a, b), passed in outcomes])
        for (a, b), passed in outcomes:
            tried.add(frozenset((a, b)))
            if b in good:  # a suspect beside a reference
                pending.remove(a)
                (found.cleared if passed else found.at_fault).append(a)
            elif passed:  # two suspects that work together are both good
                pending = [name for name in pending if name not in (a, b)]
                found.cleared += [a, b]
        good = list(references) + found.cleared
    found.undecided = pending
    return found


def round_pairs(suspects: list[str], references: list[str], tried: set[frozenset]) -> list[Pair]:
    """One round: each suspect beside a reference while references last (each host in one pair only), the
    rest beside each other in pairs not tried before."""
    free, pairs, left = list(references), [], []
    for suspect in suspects:
        if free:
            pairs.append((suspect, free.pop(0)))
        else:
            left.append(suspect)
    while left:
        first = left.pop(0)
        partner = next((other for other in left if frozenset((first, other)) not in tried), None)
        if partner is not None:
            left.remove(partner)
            pairs.append((first, partner))
    return pairs
