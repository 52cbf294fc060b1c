"""What the confirmation says while it runs: what its rounds will cost before they start, and
after each round where the intervals stand, who was dropped, and how many more rounds the
selection may need at the spread measured so far.

The confirmation is the part of a study least known in advance (search/console/estimate.py): a gpt study
on this project's 2-core VM (2026-11-28) planned its 6 rounds at ~93 s and ran 11 in 126 s,
silent all the while in a log. A line per round shows where that time goes and when it ends.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from autotune.core.console import detail, fit, say
from autotune.results.intervals import MIN_ROUNDS, t975
from autotune.search.confirmation import selection
from autotune.search.confirmation.choose import Candidate
from autotune.search.confirmation.selection import Selection
from autotune.search.round_spread import MAX_ROUNDS
from autotune.search.setup import StudySetup

log = logging.getLogger("autotune")


@dataclass(frozen=True)
class Ahead:
    """What the confirmation expects after its round ``done``: the rounds and seconds still to
    come (their mean over the simulated continuations: forecast.after_round) and the spread
    of log ratios they were drawn at."""

    done: int
    more_rounds: float
    more_s: float
    spread: float

    def as_dict(self) -> dict[str, float]:
        return {"round": self.done, "more_rounds": round(self.more_rounds, 1),
                "more_s": round(self.more_s, 1), "spread": round(self.spread, 4)}


def round_words(round_s: float, runs: int, budget_s: float, expected: int = 0,
                spread_words: str = "", from_search: bool = False) -> str:
    """What the rounds will cost, said before they start. study.confirm_runs (``runs``) run
    whatever the budget, so a budget they overrun is said here rather than found at the end.
    The selection (selection.py) runs until one finalist is left or those left are within the
    zone of each other: ``expected`` rounds where they are within it (at ``spread_words``:
    round_spread.py), fewer where one is clearly ahead, never past the budget, which holds the
    tie-break's rounds too. ``from_search``: the first round is the search's own windows, and
    costs nothing more."""
    words = (f"a round ~{round_s:.0f}s (their search windows, less what a round skips: "
             "ceilings, profiles, the all-reduce probe)")
    paid = 1 if from_search else 0
    if (runs - paid) * round_s > budget_s:
        return (f"{words}: the {runs} rounds an interval needs take "
                f"~{(runs - paid) * round_s:.0f}s, over study.confirm_budget_s={budget_s:g}; "
                "they run all the same (fewer finalists, study.confirm_top, or a shorter "
                "window.measure_seconds would fit)")
    least = max(runs, expected) if expected else runs
    cost = max(0, least - paid) * round_s
    search = " (the first from the search's windows)" if from_search else ""
    if not expected:
        return f"{words}, so ~{cost:.0f}s for the {runs} rounds it needs at least{search}"
    if cost > budget_s:
        return (f"{words}: finalists within the zone of each other would take ~{expected} "
                f"rounds{search} at {spread_words}, ~{cost:.0f}s: the budget ({budget_s:g}s) "
                "ends them, the tie-break inside it; one finalist clearly ahead ends them "
                "sooner")
    return (f"{words}: at most ~{expected} rounds{search}, ~{cost:.0f}s, at {spread_words} "
            "(finalists within the zone of each other take that many; one clearly ahead "
            "ends them sooner)")


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
    round is left out of every comparison (intervals.counted_rounds), of an interval over the
    baseline while MIN_ROUNDS quiet ones remain. Said, since a round left out changes no
    interval: a 2-rank study's round 5 printed round 4's intervals again, with no word why
    (2026-11-28)."""
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
        return (f"{who} ran beside other work: left out of {whose} interval"
                + ("s" if whose == "their" else "") + " and of every comparison")
    return (f"{who} ran beside other work: left out of every comparison, which waits for "
            f"quiet rounds; counted in the interval, as fewer than {MIN_ROUNDS} quiet rounds "
            "remain")


def progress_words(done: int, cands: Sequence[Candidate], sel: Selection, spent_s: float,
                   budget_s: float, base: int | None = None, said: set[str] | None = None,
                   busy: str = "", gone: Sequence[int] = (), against: bool = False,
                   ahead: Ahead | None = None) -> str:
    """After round ``done``: each finalist still in question, who this round dropped, and when
    the rounds end: decided, or at most how many more rounds the pairs still open need at
    their spread so far (selection.rounds_left: a bound, said as one; a finalist clearly
    behind is dropped sooner). The baseline (trial ``base``), when it is a finalist, is 1.00x
    by definition: named so. ``against``: the finalists are decided, the winner not yet against
    the baseline (confirm.decided). Why the budget or the round cap ends the rounds is said once
    (``said`` keeps what was): the README's CPU study repeated the same 120 characters on 9
    of its 11 rounds (2026-11-28). ``ahead``: the rounds expected after this one, said first
    (the bound is a bound: the README's command stated ~11 more rounds after its third and
    decided after its fourth, 2026-12-06)."""
    said = set() if said is None else said
    if not cands:
        return f"round {done}: no finalist measured"
    each = "; ".join(f"trial {c.number} (the baseline)" if c.number == base else
                     f"trial {c.number} {c.interval.point:.2f}x"
                     + (f" ({c.interval.low:.2f}-{c.interval.high:.2f})" if c.interval.known
                        else "") for c in cands)
    head = f"round {done} ({spent_s:.0f}s{'; ' + busy if busy else ''}): {each}"
    if ahead is not None:
        head += (f"; ~{ahead.more_rounds:.1f} more round(s) expected, ~{ahead.more_s:.0f}s "
                 f"(simulated at rounds spread +-{100 * ahead.spread:.1f}%)")
    if gone:
        head += (f"; dropped trial(s) {', '.join(map(str, gone))}: another is ahead by more "
                 "than the selection allows")
    if against:
        return (f"{head}; the choice among the finalists is decided; the rounds go on until "
                "it is told apart from your configuration (ahead, within the zone, or behind)")
    if selection.resolved(cands, sel):
        return head + ("; decided" if len(cands) == 1 else
                       f"; decided: those left lie within {100 * sel.zone:.0f}% of each other")
    left = selection.rounds_left(cands, sel)
    if left is None:
        return f"{head}; the choice starts once each pair has {sel.first} quiet rounds"
    per_round = spent_s / max(done, 1)
    more_s = left * per_round
    budget_left = max(0.0, budget_s - spent_s)
    state = f"at most ~{left} more round(s), ~{more_s:.0f}s, at the spread so far (the bound)"
    if budget_left <= 0:
        return f"{head}; the budget ({budget_s:g}s) is spent: the fastest measured is exported"
    if more_s > budget_left:
        if "budget" in said:
            return f"{head}; the budget ends them ({budget_left:.0f}s left)"
        said.add("budget")
        return (f"{head}; {state}, more than the budget allows ({budget_left:.0f}s left): "
                "they stop at it, and the fastest measured is exported with its interval")
    if done + left > MAX_ROUNDS:
        if "cap" in said:
            return f"{head}; the {MAX_ROUNDS}-round cap ends them"
        said.add("cap")
        return (f"{head}; {state}, past the {MAX_ROUNDS} rounds a confirmation runs: they stop "
                "there, and the fastest measured is exported with its interval")
    return f"{head}; {state}"


def confirming_line(others: Sequence[int], base: int, budget_s: float) -> str:
    """The confirmation's start at a glance (its statistics are details)."""
    return fit(f"confirming trials {', '.join(map(str, others))} against yours (trial {base}) "
               f"in interleaved rounds, at most {budget_s:.0f} s")


def round_line(done: int, cands: Sequence[Candidate], spent_s: float, base: int | None,
               gone: Sequence[int] = (), more_s: float | None = None) -> str:
    """A round at a glance (progress_words is its detail): the finalists fastest first, the
    leader with its interval, who this round dropped, the seconds expected after it
    (``more_s``), in one line of at most 120 characters."""
    ahead = sorted((c for c in cands if c.number != base), key=lambda c: -c.interval.point)
    each = [f"trial {c.number} {c.interval.point:.2f}x" + (
        f" ({c.interval.low:.2f}-{c.interval.high:.2f})" if i == 0 and c.interval.known else "")
        for i, c in enumerate(ahead)]
    dropped = f"; dropped {', '.join(map(str, gone))}" if gone else ""
    left = f"; ~{more_s:.0f}s more expected" if more_s is not None else ""
    return fit(f"  round {done} ({spent_s:.0f}s{left}): "
               f"{', '.join(each) or 'no finalist measured'}{dropped}")


def race_words(rounds_run: int, race_s: float, cands: Sequence[Candidate],
               dropped: Collection[int], base: int) -> str:
    """What the confirmation starts from where the search raced its finalists
    (search/loop/race.py): the rounds, each finalist's interval so far, who the race dropped."""
    parts = [f"trial {c.number} {c.interval.text()}" for c in cands if c.number != base]
    gone = (f"; dropped by the race (shown slower than another): trial(s) "
            f"{', '.join(map(str, sorted(dropped)))}" if dropped else "")
    return (f"from the search's race: {rounds_run} round(s), {race_s:.0f}s, counted in the "
            f"rounds and the budget: {'; '.join(parts) or 'no finalist measured yet'}{gone}")


def announce(setup: StudySetup, base: int, active: list[int], same: Collection[int], runs: int,
              sel: Selection, round_s: float) -> None:
    """Say what the rounds compare, when they stop, and what they are expected to cost."""
    others = [n for n in active if n != base]
    prec = setup.study.confirm_precision
    say(confirming_line(others, base, setup.study.confirm_budget_s))
    detail("confirming: trials %s and the baseline (trial %d%s) in randomized rounds: at "
             "least %d, then until one is left or those left lie within %.0f%% of each other "
             "(study.indifference; correct selection %.0f%%, windows %s noisy)%s, or %.0fs",
             ", ".join(map(str, others)), base,
             ", itself a finalist" if len(others) < len(active) else "", runs,
             100 * sel.zone, 100 * sel.confidence,
             f"{100 * sel.noise:.1f}%" if sel.noise else "not known how",
             f", then the answers to +-{100 * prec:.0f}% (study.confirm_precision)"
             if prec is not None else "", setup.study.confirm_budget_s)
    if set(same) - {base}:
        detail("  trains the same model as yours (speed and numerics knobs only): trial(s) %s, "
                 "for the same-training answer", ", ".join(map(str, sorted(set(same) - {base}))))
    spread = setup.round_spread
    expected = (selection_rounds(spread.spread, sel, max(runs, sel.first)) if spread else 0)
    detail("  %s", round_words(round_s, runs, setup.study.confirm_budget_s, expected,
                                 spread.words() if spread else ""))


def selection_rounds(spread: float, sel: Selection, least: int) -> int:
    """The rounds the selection is expected to take at rounds of this spread, at the gap
    between two finalists that takes longest (selection.hardest), at least ``least``, at most
    MAX_ROUNDS. One finalist clearly ahead ends them sooner; that is not known before the
    rounds, so the estimate says the longest, which the budget caps."""
    return min(MAX_ROUNDS, max(least, selection.hardest(spread ** 2, sel, least)))
