"""What the confirmation says while it runs: what its rounds will cost before they start, and
after each round where the intervals stand and how many more rounds they need at the spread
measured so far.

The confirmation is the part of a study least known in advance (search/console/estimate.py): a gpt study
on this project's 2-core VM (2026-11-28) planned its 6 rounds at ~93 s and ran 11 in 126 s,
silent all the while in a log. A line per round shows where that time goes and when it ends.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from autotune.results.intervals import MIN_ROUNDS, t975
from autotune.search.confirmation.choose import Candidate
from autotune.search.round_spread import MAX_ROUNDS


def round_words(round_s: float, runs: int, floor: int, budget_s: float, expected: int = 0,
                spread_words: str = "") -> str:
    """What the rounds will cost, said before they start. study.confirm_runs (``runs``) run
    whatever the budget, so a budget they overrun is said here rather than found at the end;
    a precision stop also waits for the windows' trusted rounds (``floor``), which the budget
    can cut. The README's CPU study said "~50s for the 3 rounds it needs" beside "trusted from
    round 6" when only the first were counted, and ran 10 rounds in 153 s (2026-11-27). The rounds
    a precise interval is ``expected`` to need (at ``spread_words``: round_spread.py) are said
    beside the least, with the budget where it ends them first."""
    words = (f"a round ~{round_s:.0f}s (their search windows, less what a round skips: "
             "ceilings, profiles, the all-reduce probe)")
    if runs * round_s > budget_s:
        return (f"{words}: the {runs} rounds an interval needs take ~{runs * round_s:.0f}s, "
                f"over study.confirm_budget_s={budget_s:g}; they run all the same (fewer "
                "finalists, study.confirm_top, or a shorter window.measure_seconds would fit)")
    least = max(runs, floor)
    if least * round_s > budget_s:
        return (f"{words}: the {least} rounds a precise interval needs take "
                f"~{least * round_s:.0f}s, over study.confirm_budget_s={budget_s:g}; the "
                f"rounds stop at the budget, after {runs} at least, and the interval says how "
                "precise it got")
    words = f"{words}, so ~{least * round_s:.0f}s for the {least} rounds it needs at least"
    if expected <= least:
        return words
    if expected * round_s > budget_s:
        return (f"{words}; at {spread_words}, the ~{expected} rounds of a +-precision interval "
                f"would take ~{expected * round_s:.0f}s: the budget ({budget_s:g}s) ends them")
    return f"{words}; ~{expected} rounds, ~{expected * round_s:.0f}s, at {spread_words}"


def rounds_for(c: Candidate, precision: float) -> int | None:
    """The rounds at which ``c``'s interval would be +-precision, at the spread of its rounds
    so far (the half-width of a t interval shrinks as t975(n-1)/sqrt(n)); None before an
    interval is known, MAX_ROUNDS + 1 where it would take more than the rounds allow."""
    iv = c.interval
    if not iv.known or iv.rounds < MIN_ROUNDS:
        return None
    if iv.half_width <= precision:
        return iv.rounds
    spread = iv.half_width * math.sqrt(iv.rounds) / t975(iv.rounds - 1)
    for n in range(iv.rounds + 1, MAX_ROUNDS + 1):
        if t975(n - 1) * spread / math.sqrt(n) <= precision:
            return n
    return MAX_ROUNDS + 1


def busy_words(order: Sequence[int], contended: Mapping[int, Sequence[bool]], base: int) -> str:
    """Which windows of the last round ran beside other work, and what became of them: such a
    pair is left out of its interval while MIN_ROUNDS quiet ones remain (choose.interval_of).
    Said, since a round left out changes no interval: a 2-rank study's round 5 printed round
    4's intervals again, with no word why (2026-11-28)."""
    busy = [n for n in order if contended.get(n) and contended[n][-1]]
    if not busy:
        return ""

    def quiet(n: int) -> int:
        return sum(not (a or b) for a, b in zip(contended[n], contended[base], strict=False))

    if base in busy:
        pairs, who, whose = [n for n in order if n != base], "the baseline's window", "every"
    elif len(busy) == 1:
        pairs, who, whose = busy, f"trial {busy[0]}'s window", "its"
    else:
        pairs, who, whose = busy, f"the windows of trials {', '.join(map(str, busy))}", "their"
    if all(quiet(n) >= MIN_ROUNDS for n in pairs):
        return f"{who} ran beside other work: left out of {whose} interval" + (
            "s" if whose == "their" else "")
    return (f"{who} ran beside other work: counted, as fewer than {MIN_ROUNDS} quiet rounds "
            "remain")


def progress_words(done: int, cands: Sequence[Candidate], floor: int, precision: float,
                   spent_s: float, budget_s: float, base: int | None = None,
                   said: set[str] | None = None, busy: str = "") -> str:
    """After round ``done``: each finalist still in question, and when the rounds would end at
    the spread measured so far (a projection, said as one: the next rounds may be noisier).
    The baseline (trial ``base``), when it is a finalist, is 1.00x by definition: named so.
    Why the budget or the round cap ends the rounds is said once (``said`` keeps what was):
    the README's CPU study repeated the same 120 characters on 9 of its 11 rounds
    (2026-11-28)."""
    said = set() if said is None else said
    if not cands:
        return f"round {done}: no finalist measured"
    each = "; ".join(f"trial {c.number} (the baseline)" if c.number == base else
                     f"trial {c.number} {c.interval.point:.2f}x"
                     + (f" ({c.interval.low:.2f}-{c.interval.high:.2f})" if c.interval.known
                        else "") for c in cands)
    head = f"round {done} ({spent_s:.0f}s{'; ' + busy if busy else ''}): {each}"
    needs = [rounds_for(c, precision) for c in cands]
    if any(n is None for n in needs):
        return f"{head}; intervals from round {MIN_ROUNDS}"
    widest = max(c.interval.half_width for c in cands)
    end = max([floor, done, *[n for n in needs if n is not None]])
    state = f"widest +-{100 * widest:.1f}% of the +-{100 * precision:.0f}% asked"
    if end <= done:
        return f"{head}; {state}"
    per_round = spent_s / max(done, 1)
    more_s = (end - done) * per_round
    left_s = max(0.0, budget_s - spent_s)
    if left_s <= 0:
        return (f"{head}; {state}: the budget ({budget_s:g}s) is spent, and the interval "
                "says how precise it got")
    if more_s > left_s:
        if "budget" in said:
            return f"{head}; {state}: the budget ends them ({left_s:.0f}s left)"
        said.add("budget")
        return (f"{head}; {state}: at this spread more rounds than the budget allows "
                f"({left_s:.0f}s left): they stop at it, and the interval says how precise "
                "it got")
    if end > MAX_ROUNDS:  # a gpt study's round 22 said "than the budget allows", 142 s left
        if "cap" in said:
            return f"{head}; {state}: the {MAX_ROUNDS}-round cap ends them"
        said.add("cap")
        return (f"{head}; {state}: at this spread more than the {MAX_ROUNDS} rounds a "
                "confirmation runs: they stop there, and the interval says how precise it got")
    why = "at this spread" if end > floor else "the windows' noise trusts no fewer"
    return f"{head}; {state}: ~{end - done} more round(s), ~{more_s:.0f}s ({why})"


def race_words(rounds_run: int, race_s: float, cands: Sequence[Candidate],
               dropped: Collection[int], base: int) -> str:
    """What the confirmation starts from where the search raced its finalists
    (search/loop/race.py): the rounds, each finalist's interval so far, who the race dropped."""
    parts = [f"trial {c.number} {c.interval.text()}" for c in cands if c.number != base]
    gone = (f"; dropped by the race (shown slower than another): trial(s) "
            f"{', '.join(map(str, sorted(dropped)))}" if dropped else "")
    return (f"from the search's race: {rounds_run} round(s), {race_s:.0f}s, counted in the "
            f"rounds and the budget: {'; '.join(parts) or 'no finalist measured yet'}{gone}")
