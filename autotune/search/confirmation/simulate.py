"""The confirmation simulated: synthetic studies whose windows carry the noise this project has
measured, decided by the confirmation's own code, so that its stated levels are measured rather
than asserted.

Kim and Nelson checked their procedure the same way (ACM TOMACS 11(3), 2001, section 5: Monte
Carlo estimates of the probability of correct selection at the least favourable
configuration), and an interval is honest when its coverage is measured (Efron and Tibshirani,
An Introduction to the Bootstrap, 1993, ch. 12-14, on checking an interval's coverage by
simulation). What is drawn here, per window (each window a fresh process, as the
confirmation's are), on the log of its figure:

- the window-to-window spread (``Noise.spread``, 3% on a quiet GPU to 17% on a busy 2-core
  CPU): normal, independent between windows;
- a per-process offset (``Noise.offset``, ~4%: docs/benchmarks.md, "Warm processes for the
  confirmation's rounds"): normal, one per window, shared by the window's two halves, so the
  window's own noise (its halves, which the selection's first stage reads as
  ``Selection.noise``) does not see it;
- the search's windows ran minutes apart, not interleaved: each carries a drift of its own
  (``Noise.drift``; docs/benchmarks.md records speedups moving 5-10% between periods minutes
  apart, a ratio's 5% being two windows' 3.5% each), where a confirmation round's drift hits
  all its windows alike and cancels in their ratios (so it is not drawn for them);
- slow windows: about one in ten (``Noise.slow_share``) runs 15-25% slow throughout, also
  unseen by its halves;
- a contended round (``Setting.contended``): every window of that confirmation round is
  flagged as having run beside other work, and half of them lose 20-50%; the rounds that count
  (results/intervals.counted_rounds) leave it out, which is what this checks.

The windows are drawn for all studies at once (numpy); each study is then decided by the
selection (selection.py), the stop rule (confirm.decided) and the export (choose.decide) that a
study runs, on ``Candidate`` objects built as confirm.candidates builds them. The search's own
windows may be round 1 (``Setting.search_round``, as the confirmation took them until
2026-12-03): one per finalist, drawn as any other window, or the best of ``search_pool`` of
its configuration's (the search kept the one that read highest); the export then favours the
finalist whose search window read high (the winner's curse), which is the effect measured.
The race and the same-training group are not drawn (their rules are tested directly).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.results.intervals import t975
from autotune.search.confirmation import selection
from autotune.search.confirmation.choose import Candidate, decide, decided, interval_of, pick
from autotune.search.confirmation.selection import Selection
from autotune.search.round_spread import MAX_ROUNDS

BASE = 0  # the baseline's number; the finalists are 1..k, the first of them the truly fastest


@dataclass(frozen=True)
class Noise:
    """What a window carries besides its configuration's true speed (see the module's text)."""

    spread: float = 0.10
    offset: float = 0.04
    slow_share: float = 0.10
    slow: tuple[float, float] = (0.15, 0.25)
    drift: float = 0.035


@dataclass(frozen=True)
class Setting:
    """One simulated study design: the finalists' true speedups over the baseline (1.0), the
    noise, whether the search's windows are round 1, which confirmation round (1-based) is
    contended (None: none), and the study's terms. ``changed``: each finalist's knobs changed
    (the tie-break among finalists within the zone; () all 1: the tie goes to the highest
    figure, where the export's own selection favours luck most). ``search_pool``: each
    finalist's search window is the highest of this many (a finalist the search kept among
    others of about its speed because its window read highest; 1: a plain window)."""

    speedups: tuple[float, ...]
    noise: Noise = field(default_factory=Noise)
    search_round: bool = False
    contended: int | None = None
    zone: float = 0.05
    confidence: float = 0.95
    runs: int = 3
    max_rounds: int = MAX_ROUNDS
    changed: tuple[int, ...] = ()
    search_pool: int = 1


@dataclass(frozen=True)
class Outcome:
    """One study's end: the finalist exported (its number), whether it lies within the zone of
    the true best, whether its exported 95% interval covers its true speedup, the rounds run
    (the search's included, as the confirmation counts them), why they stopped, and every
    finalist that led after some round from the least rounds on, the exported one among them
    (the numerics check vets each as it leads from then: confirm.py; what it costs is what
    they cost)."""

    exported: int
    correct: bool
    covered: bool
    rounds: int
    stopped: str
    led: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Summary:
    """A setting's figures over ``studies`` studies: the probability of correct selection, the
    coverage of the exported interval (each with its Monte Carlo standard error) and the mean
    rounds."""

    studies: int
    pcs: float
    coverage: float
    rounds: float

    @property
    def pcs_se(self) -> float:
        return math.sqrt(max(self.pcs * (1 - self.pcs), 1e-12) / self.studies)

    @property
    def coverage_se(self) -> float:
        return math.sqrt(max(self.coverage * (1 - self.coverage), 1e-12) / self.studies)


def lfc(k: int, zone: float = 0.05, best: float = 2.0) -> tuple[float, ...]:
    """KN's least favourable configuration (slippage): the best ahead of the other k - 1 by
    exactly the zone, where the probability of correct selection is lowest."""
    return (best, *[best / (1 + zone)] * (k - 1))


def windows(setting: Setting, studies: int, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every window's figure, by study, round (round 0: the search's windows) and configuration
    (0: the baseline), whether it was contended, and each search window's own noise (the
    relative difference of its halves: twice the spread, in standard deviation)."""
    n = setting.noise
    truth = np.log(np.array([1.0, *setting.speedups]))
    shape = (studies, setting.max_rounds + 1, len(truth))
    logs = truth + rng.normal(0.0, n.spread, shape) + rng.normal(0.0, n.offset, shape)
    slow = rng.random(shape) < n.slow_share
    logs += np.where(slow, np.log1p(-rng.uniform(*n.slow, shape)), 0.0)
    logs[:, 0, :] += rng.normal(0.0, n.drift, (studies, len(truth)))  # the search's, apart
    for _ in range(setting.search_pool - 1):  # the search kept the highest of its windows
        other = (truth + rng.normal(0.0, n.spread, (studies, len(truth)))
                 + rng.normal(0.0, n.offset, (studies, len(truth)))
                 + rng.normal(0.0, n.drift, (studies, len(truth))))
        logs[:, 0, 1:] = np.maximum(logs[:, 0, 1:], other[:, 1:])
    busy = np.zeros(shape, dtype=bool)
    if setting.contended is not None:
        r = setting.contended  # the confirmation's round r is index r (0 is the search's)
        busy[:, r, :] = True
        hit = rng.random((studies, len(truth))) < 0.5
        logs[:, r, :] += np.where(hit, np.log1p(-rng.uniform(0.2, 0.5, hit.shape)), 0.0)
    # A window's halves differ by twice its own spread (selection.HALVES_PER_SD); before
    # 2026-12-07 they were drawn at a mean of the spread, as the selection then read them.
    halves = np.abs(rng.normal(0.0, 2 * n.spread, (studies, len(truth))))
    return np.exp(logs), busy, halves


def _candidates(runs: dict[int, list[float | None]], busy: dict[int, list[bool]],
                numbers: Sequence[int], changed: Sequence[int] = ()) -> list[Candidate]:
    """The finalists as confirm.candidates builds them: each one's interval over the baseline
    on the rounds that count, its figures and contended windows."""
    out = []
    for n in numbers:
        either = [a or b for a, b in zip(busy[n], busy[BASE], strict=False)]
        iv = interval_of(runs[n], runs[BASE], either)
        if iv.rounds:
            knobs = changed[n - 1] if changed else 1
            out.append(Candidate(n, iv, knobs, 0.0, tuple(runs[n]), tuple(busy[n])))
    return out


def _paired(runs: dict[int, list[float | None]], n: int) -> int:
    return sum(1 for c, b in zip(runs[n], runs[BASE], strict=False) if c and b)


def _stop(setting: Setting, runs: dict[int, list[float | None]], busy: dict[int, list[bool]],
          cands: list[Candidate], sel: Selection) -> str | None:
    """confirm._stop_reason without precision or a time budget: the least rounds, then
    decided, then the round cap (``Setting.max_rounds``, the budget counted in rounds)."""
    if not cands:
        return "failed"
    live = selection.racing(cands, (), sel) or cands
    if min(_paired(runs, c.number) for c in live) >= setting.runs:
        base = Candidate(BASE, cands[0].interval, 0, 0.0, tuple(runs[BASE]), tuple(busy[BASE]))
        if decided(cands, (), sel, base):
            return "decided"
    return "rounds" if len(runs[BASE]) >= setting.max_rounds else None


def study(setting: Setting, figures: np.ndarray, flags: np.ndarray, halves: np.ndarray
          ) -> Outcome:
    """One study decided as confirm.confirm decides it (no race, no same-training group, no
    precision): its windows are ``figures[round, configuration]`` (round 0 the search's).
    The selection reads the whole group every round (its drops replayed, selection.survivors);
    the next round measures those still in question."""
    k = len(setting.speedups)
    numbers = list(range(1, k + 1))
    runs: dict[int, list[float | None]] = {n: [] for n in [BASE, *numbers]}
    busy: dict[int, list[bool]] = {n: [] for n in runs}
    sel = Selection(setting.zone, setting.confidence, max(2, k),
                    selection.window_sd(float(statistics.median(halves.tolist()))))
    active, why, group, led = list(numbers), None, [], set()
    if setting.search_round:
        for n in runs:
            runs[n].append(float(figures[0, n]))
            busy[n].append(False)
        group = _candidates(runs, busy, numbers, setting.changed)
        active = [c.number for c in selection.racing(group, (), sel)]
        why = _stop(setting, runs, busy, group, sel)
    r = 0
    while not why:
        r += 1
        for n in runs:
            measured = n == BASE or n in active
            runs[n].append(float(figures[r, n]) if measured else None)
            busy[n].append(bool(flags[r, n]) if measured else False)
        group = _candidates(runs, busy, numbers, setting.changed)  # the dropped too: drops are replayed
        active = [c.number for c in selection.racing(group, (), sel)]
        if group and len(runs[BASE]) >= setting.runs:  # confirm.answers, as confirm vets them
            led.add(pick(selection.survivors(group, sel), sel)[0].number)
        why = _stop(setting, runs, busy, group, sel)
    return _outcome(setting, runs, group, sel, why, frozenset(led))


def _outcome(setting: Setting, runs: dict[int, list[float | None]], group: list[Candidate],
             sel: Selection, why: str, led: frozenset[int] = frozenset()) -> Outcome:
    """What the study exports (choose.decide) and whether it is right."""
    record = decide({"baseline_trial": BASE, "runs": {str(n): v for n, v in runs.items()},
                     "precision": None}, group, sel)
    leader = int(record["leader"])
    truth = setting.speedups[leader - 1]
    iv = next(c.interval for c in group if c.number == leader)
    correct = math.log(max(setting.speedups) / truth) < math.log1p(setting.zone) - 1e-9
    return Outcome(leader, correct, iv.low <= truth <= iv.high, len(runs[BASE]), why,
                   led | {leader})


def simulate(setting: Setting, studies: int, seed: int = 0) -> list[Outcome]:
    """``studies`` studies of one setting, their windows drawn from ``seed``."""
    figures, flags, halves = windows(setting, studies, np.random.default_rng(seed))
    return [study(setting, figures[i], flags[i], halves[i]) for i in range(studies)]


def summary(outcomes: Sequence[Outcome]) -> Summary:
    n = len(outcomes)
    return Summary(n, sum(o.correct for o in outcomes) / n, sum(o.covered for o in outcomes) / n,
                   statistics.fmean(o.rounds for o in outcomes))


def expected_rounds(setting: Setting, studies: int = 400, seed: int = 0) -> float:
    """The rounds a confirmation of this design takes on average (the search's round counted
    where it is one): what a stated wall time can rest on, at the spread the windows measured
    and the gaps between the finalists' figures."""
    return summary(simulate(setting, studies, seed)).rounds


def curse(studies: int, k: int = 5, spread: float = 0.10, offset: float = 0.04,
          search_round: bool = True, seed: int = 0, slow_share: float = 0.0,
          drift: float = 0.0, search_pool: int = 1) -> float:
    """The winner's curse alone, vectorised: k finalists all truly 2.0x, the one whose round 1
    read fastest exported over 3 rounds (round 1 its search window, or a fresh round), and the
    coverage of its 3-round 95% interval over the baseline (results/intervals: Student's t on
    the log ratios). With ``search_round`` False the export is chosen on its search window
    alike, but its interval rests on 3 fresh rounds."""
    setting = Setting((2.0,) * k, Noise(spread, offset, slow_share, drift=drift), max_rounds=6,
                      search_pool=search_pool)
    figures, _, _ = windows(setting, studies, np.random.default_rng(seed))
    logs = np.log(figures[:, :, 1:] / figures[:, :, :1])  # ratio to the baseline, by round
    pick = np.argmax(figures[:, 0, 1:], axis=1)  # the fastest search window
    rows = np.arange(studies)
    chosen = np.stack([logs[rows, r, pick] for r in ((0, 1, 2) if search_round else (1, 2, 3))],
                      axis=1)
    mean, sd = chosen.mean(axis=1), chosen.std(axis=1, ddof=1)
    half = t975(2) * sd / math.sqrt(3)
    truth = math.log(2.0)
    return float(np.mean((mean - half <= truth) & (truth <= mean + half)))
