"""The numerics check inside the confirmation: each answer's leader is checked as soon as it
leads, and a refused one leaves the rounds, so that the rounds' budget goes to finalists that
can be exported. The check itself is search/checks/numerics.py's (a room above this one: it is
handed down as ``vet``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from autotune.search.confirmation.choose import Candidate

log = logging.getLogger("autotune")


def vet_leaders(vet: Callable[[int], bool] | None, leaders: Sequence[Candidate], base: int,
                refused: dict[int, int], round_no: int) -> set[int]:
    """Check each leader not checked yet (the baseline, the user's own, needs none); record
    the refused ones in ``refused`` with the round they led after, and return them. A trial is
    checked once: the check keeps its verdict (numerics.py's record), so asking again costs
    nothing."""
    if vet is None:
        return set()
    out: set[int] = set()
    for c in leaders:
        if c.number == base or c.number in refused:
            continue
        if not vet(c.number):
            refused[c.number] = round_no
            out.add(c.number)
            log.info("  trial %d leads after round %d and the numerics check refused it: the "
                     "rounds go on without it", c.number, round_no)
    return out
