"""Which finalists the rounds still have to tell apart: a fully sequential indifference-zone
selection (pure: rounds in, verdicts out).

The confirmation's question is not how fast each finalist is to +-5%, but which one to export,
where a difference smaller than the user's indifference zone (``study.indifference``, 5%) is
not worth a choice. Kim and Nelson's procedure KN (ACM TOMACS 11(3), 2001) answers it over
paired, common-random-number observations: here each round's windows, taken side by side, so
that the machine's drift over minutes hits both and cancels in their ratio. For two finalists
``i`` and ``l`` with ``r`` rounds that count (results/intervals.counted_rounds: a round with a
contended window is left out of every comparison), on the log ratio of their figures
(``d``, mean ``mean``, sample variance ``S²``), with ``δ = ln(1 + zone)`` and ``k`` systems:

    η = ½ [(2α / (k-1))^(-2/f) - 1],   h² = 2 η f            (KN, c = 1)
    W(r) = max(0, h² S² / (2 δ r) - δ / 2)

and ``i`` is dropped as soon as ``mean(log l/i) > W(r)``: by KN's triangle, if ``i`` were better
than ``l`` by the zone or more, that happens with probability at most α/(k-1), so the best is
kept with probability at least 1 - α (``study.correct_selection``). The triangle closes (W = 0)
at ``r = h² S² / δ²`` rounds. What holds it to KN:

- ``k`` is fixed before the first round, as KN fixes it: the confirmation's finalists, and in
  the search's race the most finalists the confirmation can hold (race.most_finalists), so
  α/(k-1) does not grow as finalists are dropped.
- A drop is for good, in each group (all the finalists; the same-training ones): ``survivors``
  replays the group's rounds one by one, so a finalist dropped among all but still measured
  for the same-training answer is never judged among all again (before 2026-12-03 it was,
  every round, and could come back).
- The t quantile of the pair's interval is exact (results/intervals.t_quantile) at the first
  stage's 2 degrees of freedom and the Bonferroni level, where an approximation was 2-4% low.
- The finalists' search windows are not a round: they made the finalists (the one that read
  highest, of its configuration's, was kept: the winner's curse) and ran minutes apart. On
  the simulated confirmation (simulate.py), 5 finalists all truly 2.0x at 3% windows, each
  finalist's search window the best of 3, the exported interval covered 88.4% with them as
  round 1 against 90.3% without (3,000 studies each, ±0.6); they still order the finalists.

Three departures, each said where it acts:

- The variance is updated every round, as in KN++ (Kim and Nelson, Operations Research 54(3),
  2006), and h² is KN's constant at the degrees of freedom of the variance in hand (f = r - 1):
  KN's own at the first stage, tending to KN++'s, -2 ln(2α/(k-1)), as the rounds grow. Under
  S² lies a floor from the windows' own noise (``noise``: a window's standard deviation, read
  from the search windows' two halves by window_sd) before PRECISE_ROUNDS rounds: a few
  rounds that agree by luck (four once agreed to +-3% on 6-11% noisy windows) do not close
  the triangle at once. From PRECISE_ROUNDS on, S² is the
  rounds' own (KN's first stage of n0 = 6, then KN++): a window's spread is one difference of
  two halves, and as a floor for every round it held a pair's variance at 0.032 where its
  rounds measured 0.007, undecided at the budget after 10 rounds where the measured variance
  decides at round 6 (the README's study, replayed on its recorded rounds). Where that noise is
  unknown the first stage is PRECISE_ROUNDS.
- Two finalists are **within the zone** of each other once their paired interval, at
  1 - α/(k-1) each way (Bonferroni over the pairs, as KN's own error is split), lies inside
  +-zone: choosing either costs at most the zone. KN alone would drop one of them by the toss
  of their means when its triangle closes, since a pair within the zone is where its triangle
  stays open longest; the interval is read after every round from the first stage on, so
  that two finalists within a percent of each other reach it first (for finalists 2% apart
  KN's elimination comes first, and the faster is kept). Reading an interval after every round
  is a sequential look its 1 - α/(k-1) does not price in: the error of calling a pair within
  the zone that is not is somewhat above α/(k-1) (a confidence sequence would hold it exactly);
  where the best is ahead of the rest by the zone or more, that is the one error added to
  KN's. The rounds stop when one finalist remains or those left are within the zone of each
  other (``resolved``); the tie-break among them (choose.pick: fewer knobs changed, lower
  memory) then costs at most the zone, by construction.
- The rounds end at the budget or the round cap (round_spread.MAX_ROUNDS) where KN would go
  on: then the fastest measured is exported, undecided, and said so (choose.undecided_words).

What the stated levels are worth, measured by simulate.py on the confirmation's own code
(docs/benchmarks.md, "The confirmation's stated levels, simulated"): at KN's least favourable
configuration the best is kept 95% of the time where the rounds end decided (3% windows, up to
5 finalists), and less where the cap ends them first (10% windows: 90% at 2 finalists, ~80% at 5).
The exported 95% interval covers ~95% where one finalist is ahead; among finalists all within
the zone of each other it covers 90-92%: the rounds stop when the pairs' intervals read narrow
(a stop that favours a low variance) and the export is one of several tied.

The indifference-zone-free successor (Fan, Hong and Nelson, Operations Research 64(6), 2016)
needs no zone, but a user does have one: what difference is worth a changed configuration.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol, TypeVar

from autotune.results.intervals import (
    MIN_ROUNDS,
    counted_rounds,
    mean_variance,
    t975,
    t_quantile,
)


class Compared(Protocol):
    """What the selection reads of a finalist (choose.Candidate has it): its number, its
    figure in each round (None: not measured) and whether that window was contended."""

    @property
    def number(self) -> int: ...
    @property
    def runs(self) -> tuple[float | None, ...]: ...
    @property
    def busy(self) -> tuple[bool, ...]: ...


C = TypeVar("C", bound=Compared)
Runs = tuple[float | None, ...]
Flags = tuple[bool, ...]

#: The first stage where the windows' own noise is unknown: no floor then holds S² up, and four
#: rounds of the README's CPU study once agreed to +-3% by chance (2.19x, 2.12-2.25x, on 6-11%
#: noisy windows) where the configuration re-measured alone read 2.07x.
PRECISE_ROUNDS = 6
#: However many systems, the rounds a pair's triangle may need are counted up to this (the
#: confirmation itself stops at round_spread.MAX_ROUNDS and at its budget).
_HORIZON = 1000

Verdict = Literal["first", "second", "within"]


@dataclass(frozen=True)
class Selection:
    """The selection's terms: the ``zone`` (0.05: a difference under 5% is not worth a choice),
    the probability of correct selection, the ``systems`` compared (KN's k), and the windows'
    own ``noise`` (0: unknown)."""

    zone: float
    confidence: float
    systems: int
    noise: float = 0.0

    @property
    def delta(self) -> float:
        return math.log1p(self.zone)

    @property
    def first(self) -> int:
        """The rounds that count a pair needs before any verdict (KN's first stage)."""
        return MIN_ROUNDS if self.noise > 0 else PRECISE_ROUNDS

    def h2(self, rounds: int) -> float:
        """KN's h² at the degrees of freedom of ``rounds`` rounds' variance."""
        f = max(1, rounds - 1)
        alpha = 1.0 - self.confidence
        base = 2 * alpha / max(1, self.systems - 1)
        eta = 0.5 * (base ** (-2.0 / f) - 1.0)
        return 2.0 * eta * f

    def within_half(self, rounds: int, s2: float) -> float:
        """The half-width of a pair's interval of log ratios at 1 - α/(k-1) one side."""
        p = 1.0 - (1.0 - self.confidence) / max(1, self.systems - 1)
        return t_quantile(p, rounds - 1) * math.sqrt(s2 / rounds)

    def variance(self, s2: float, rounds: int) -> float:
        """The pair's variance after ``rounds`` rounds: before PRECISE_ROUNDS held up by the
        windows' own noise (two windows, each that noisy, in one log ratio), the rounds' own
        from then on."""
        return max(s2, 2.0 * self.noise ** 2) if rounds < PRECISE_ROUNDS else s2

    def as_dict(self) -> dict[str, float | int]:
        return {"indifference": self.zone, "correct_selection": self.confidence,
                "systems": self.systems, "window_noise": round(self.noise, 4)}

    @classmethod
    def from_dict(cls, d: dict[str, float | int]) -> Selection:
        return cls(float(d["indifference"]), float(d["correct_selection"]), int(d["systems"]),
                   float(d.get("window_noise") or 0.0))


@dataclass(frozen=True)
class Pair:
    """Two finalists over the rounds that count: the mean and variance of log(first/second)
    (``variance`` as the verdict uses it, ``measured`` the rounds' own), KN's h² and the
    half-width of the pair's interval (``within_half``)."""

    rounds: int
    mean: float
    variance: float
    h2: float
    half: float
    measured: float

    def margin(self, delta: float) -> float:
        """h² S² / (2 δ r) - δ/2: KN's W(r) before the max with 0 (negative past the close)."""
        return self.h2 * self.variance / (2 * delta * self.rounds) - delta / 2

    def ratio(self) -> float:
        return math.exp(self.mean)


def pair(a: Compared, b: Compared, sel: Selection) -> Pair | None:
    """``a`` over ``b`` on the quiet rounds that measured both; None before the first stage's
    rounds are there (a contended round does not count: counted_rounds)."""
    return _pair(tuple(a.runs), tuple(b.runs), tuple(a.busy), tuple(b.busy), sel)


@lru_cache(maxsize=1 << 15)
def _pair(a: Runs, b: Runs, busy_a: Flags, busy_b: Flags, sel: Selection) -> Pair | None:
    """pair on the figures themselves: a pure function of them, kept, since each round asks
    it of the same pairs many times (the drops, both answers' verdicts, the words)."""
    idx, quiet = counted_rounds(a, b, busy_a, busy_b, least=sel.first)
    if not quiet or len(idx) < sel.first:
        return None
    logs = [math.log(float(a[i] or 0.0) / float(b[i] or 1.0)) for i in idx]
    mean, measured = mean_variance(logs)
    s2 = sel.variance(measured, len(logs))
    return Pair(len(logs), mean, s2, sel.h2(len(logs)), sel.within_half(len(logs), s2),
                measured)


def verdict(a: Compared, b: Compared, sel: Selection) -> Verdict | None:
    """"within": the two lie within the zone of each other (their interval inside it);
    "second": ``b`` is dropped (``a`` ahead by more than KN's W); "first": ``a`` is; None:
    more rounds."""
    p = pair(a, b, sel)
    if p is None:
        return None
    if abs(p.mean) + p.half < sel.delta:
        return "within"
    m = p.margin(sel.delta)
    if p.mean > max(0.0, m):
        return "second"
    if p.mean < -max(0.0, m):
        return "first"
    return None


def closing(variance: float, sel: Selection, least: int = MIN_ROUNDS) -> int:
    """The fewest rounds, at least ``least``, at which a pair of this variance has its triangle
    closed: h²(r) S² / δ² <= r. Every pair is decided by then (the bound said per round)."""
    for r in range(max(least, sel.first), _HORIZON):
        if sel.h2(r) * sel.variance(variance, r) / sel.delta ** 2 <= r:
            return r
    return _HORIZON


def hardest(variance: float, sel: Selection, least: int = MIN_ROUNDS) -> int:
    """The rounds a pair of this variance needs at the gap that takes longest to decide, its
    mean where it is expected: a gap near 0 ends within the zone, a wide one by KN's drop, and
    between them both take longest (the estimate's rounds: the gap is not known before the
    rounds, and one finalist clearly ahead ends them sooner)."""
    worst = max(least, sel.first)
    for step in range(0, 31):
        gap = sel.delta * step / 20  # 0 to 1.5 zones
        for r in range(max(least, sel.first), _HORIZON):
            s2 = sel.variance(variance, r)
            m = sel.h2(r) * s2 / (2 * sel.delta * r) - sel.delta / 2
            if gap + sel.within_half(r, s2) < sel.delta or gap > max(0.0, m):
                worst = max(worst, r)
                break
        else:
            return _HORIZON
    return worst


def eliminated(cands: Sequence[Compared], sel: Selection) -> set[int]:
    """The candidates KN drops on these rounds: each one that some other still in the group
    leads by more than W (all pairs against the group as it stood, as KN's I_old)."""
    out = set()
    for a in cands:
        for b in cands:
            if a is not b and verdict(a, b, sel) == "first":
                out.add(a.number)
                break
    return out


def survivors(cands: Sequence[C], sel: Selection) -> list[C]:
    """The candidates not dropped by the last round: KN's elimination is for good, so the
    group's rounds are replayed round by round (``dropped``), and one dropped at round 4
    stays dropped though round 9's figures alone would keep it. ``cands`` is the whole group
    (the dropped ones too: one that dropped another before it was dropped itself counts)."""
    gone = dropped(tuple((c.number, tuple(c.runs), tuple(c.busy)) for c in cands), sel)
    return [c for c in cands if c.number not in gone]


@dataclass(frozen=True)
class _Seen:
    """A candidate's figures up to some round."""

    number: int
    runs: Runs
    busy: Flags


@lru_cache(maxsize=1 << 12)
def dropped(group: tuple[tuple[int, Runs, Flags], ...], sel: Selection) -> frozenset[int]:
    """Who KN has dropped from ``group`` (number, figures by round, contended by round) by its
    last round: those dropped by the round before, and those the group left standing then
    drops on the rounds so far. Kept per group and rounds, so a round adds one step."""
    last = max((len(runs) for _, runs, _ in group), default=0)
    if last == 0:
        return frozenset()
    before = dropped(tuple((n, r[:last - 1], b[:last - 1]) for n, r, b in group), sel)
    standing = [_Seen(n, r, b) for n, r, b in group if n not in before]
    return before | frozenset(eliminated(standing, sel))


def racing(cands: Sequence[C], same: Collection[int], sel: Selection) -> list[C]:
    """The candidates still in question for either answer: survivors among all, and among the
    ``same``-training ones those that survive their own group (the same-training answer needs
    its winner's interval though a faster one changes the training). Each group drops for
    good (``survivors``): one dropped from all the finalists but still in question for the
    same-training answer is measured on for that answer and never judged again among all."""
    kept = {c.number for c in survivors(cands, sel)}
    kept |= {c.number for c in survivors([c for c in cands if c.number in same], sel)}
    return [c for c in cands if c.number in kept]


def resolved(cands: Sequence[Compared], sel: Selection) -> bool:
    """One candidate left, or every two left within the zone of each other."""
    return all(verdict(a, b, sel) == "within"
               for i, a in enumerate(cands) for b in cands[i + 1:])


def decided(cands: Sequence[Compared], same: Collection[int], sel: Selection) -> bool:
    """Both answers resolved: the survivors among all, and among the same-training ones."""
    return (resolved(survivors(cands, sel), sel)
            and resolved(survivors([c for c in cands if c.number in same], sel), sel))


def rounds_left(cands: Sequence[Compared], sel: Selection) -> int | None:
    """At most how many more rounds that count the pairs still open need at their variance so
    far (their triangles close by then: each is decided); None while some pair is before its
    first stage, 0 when none is open."""
    more = [0]
    for i, a in enumerate(cands):
        for b in cands[i + 1:]:
            if verdict(a, b, sel) is not None:
                continue
            p = pair(a, b, sel)
            if p is None:
                return None
            more.append(closing(p.measured, sel, p.rounds) - p.rounds)
    return max(more)


#: A window's two halves differ by D relative to its rate; each half holds half the steps (twice
#: the window's variance), so for independent steps D spreads 2σ, σ the window's own standard
#: deviation, and |D| has median 2 x 0.6745 σ: the median of the finalists' halves over this
#: is σ. Read as σ itself (before 2026-12-07) it stood 1.35x high, and the README's 8 idle
#: studies of 2026-12-06/07 bear the factor out: sqrt(2) x their halves overstated their rounds'
#: spread by 1.74x at the median (0.56-2.52x; docs/benchmarks.md, "The confirmation decides,
#: then stops"), by 1.29x once divided by it.
HALVES_PER_SD = 2 * 0.6745


def window_sd(halves: float) -> float:
    """A window's own standard deviation from its halves' difference (measure/figures
    window_spread; the median over several windows where there are): the selection's
    ``noise``. 0 stays unknown."""
    return halves / HALVES_PER_SD


def trusted_rounds(noise: float, precision: float) -> int:
    """The fewest rounds whose interval may end the rounds on study.confirm_precision: where
    the windows' own noise (measured apart from the rounds' agreement) makes an interval of
    +-precision expected at n rounds, n rounds' agreement is not luck. Noisy or unknown
    windows need PRECISE_ROUNDS; a quiet GPU's 1% windows need 3."""
    if noise <= 0:
        return PRECISE_ROUNDS
    sd = math.sqrt(2) * noise  # the log ratio of two windows, each this noisy
    for n in range(MIN_ROUNDS, PRECISE_ROUNDS):
        if t975(n - 1) * sd / math.sqrt(n) <= precision:
            return n
    return PRECISE_ROUNDS
