"""KN's elimination is for good, per group (search/confirmation/selection.py): a finalist the
rounds dropped from all the finalists stays dropped there, though it is measured on for the
same-training answer and later rounds alone would favour it."""

from __future__ import annotations

from autotune.search.confirmation import selection
from autotune.search.confirmation.choose import Candidate, decide, interval_of
from autotune.search.confirmation.selection import Selection

BASE = [1.0] * 10
#: Trial 1 changes the training and reads 2.0x every round. Trial 2 trains your model: 1.5x in
#: rounds 1-3 (trial 1 leads it by 33% once the first stage is there, far past the triangle),
#: then 3.0x (its last 7 rounds read faster than trial 1's). Trial 3 trains your model too,
#: 1.5x throughout: the same-training group keeps trial 2.
RUNS = {1: [2.0, 2.02, 1.98, 2.0, 2.01, 1.99, 2.0, 2.02, 1.98, 2.0],
        2: [1.5, 1.52, 1.49, 3.0, 3.02, 2.98, 3.0, 3.01, 2.99, 3.0],
        3: [1.5, 1.51, 1.49, 1.5, 1.52, 1.48, 1.5, 1.51, 1.49, 1.5]}
SAME = {2, 3}
SEL = Selection(0.05, 0.95, 3, 0.02)


def _cands(rounds: int) -> list[Candidate]:
    return [Candidate(n, interval_of(r[:rounds], BASE[:rounds]), 1, 1.0, tuple(r[:rounds]),
                      (False,) * rounds) for n, r in RUNS.items()]


def test_a_finalist_dropped_among_all_stays_dropped_there_though_kept_for_its_own_group() -> None:
    # Round 3: trial 2 is dropped among all (trial 1 ahead by 33%), not among the same-training.
    early = _cands(3)
    assert 2 not in {c.number for c in selection.survivors(early, SEL)}
    assert 2 in {c.number for c in selection.racing(early, SAME, SEL)}
    # Round 10: the figures alone no longer drop it (its mean is now ahead of trial 1's, the
    # pair's variance wide), but the drop stands: among all, trial 1 is left.
    late = _cands(10)
    assert 2 not in {c.number for c in selection.survivors(late, SEL)}
    assert {c.number for c in selection.racing(late, SAME, SEL)} >= {1, 2}
    # What the user sees: the overall answer is trial 1, not the dropped trial 2, whose
    # interval over the baseline is now the highest; the same-training answer may be trial 2.
    record = decide({"baseline_trial": 0, "runs": {"0": BASE, **{str(n): r for n, r in
                                                                RUNS.items()}},
                     "precision": None}, late, SEL)
    assert record["best_trial"] == 1, record


def test_a_drop_counts_though_the_one_that_made_it_was_dropped_later() -> None:
    """The group is replayed as it stood each round: trial 2's drop by trial 1 at round 3
    stands where trial 1 itself is dropped later, by a trial 4 that joined at round 4 (a
    finalist the search found late) 50% ahead of it and level with trial 2."""
    four: list[float | None] = [None, None, None, 3.0, 3.01, 2.99, 3.0, 3.02, 2.98, 3.0]
    cands = [*_cands(10), Candidate(4, interval_of(four, BASE), 1, 1.0, tuple(four),
                                    (False,) * 10)]
    kept = {c.number for c in selection.survivors(cands, SEL)}
    assert 1 not in kept and 2 not in kept and 4 in kept
