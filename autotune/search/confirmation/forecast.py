"""How many rounds the confirmation is expected to take: its own simulation (simulate.py) run
forward from what is known, so that the wall time a study states is the rounds' expectation and
not their bound.

The selection stops when one finalist is left or those left lie within the zone of each other
(selection.py). How soon depends on how far apart the finalists are and how much the rounds
spread, neither known before the search ends. The bound (selection.hardest: finalists within
the zone of each other, at the device's prior spread of +-16% on a CPU) is what the estimate
stated until 2026-12-06, and the README's command ended in 4:10 against ~7:07 stated: its
finalists were 5-25% apart, its windows 2% noisy, and the choice decided after 4 rounds.

So, as the search ends (``at_search_end``), the confirmation is simulated with the windows'
measured noise as the rounds' spread and the finalists' true speedups drawn around their search
figures at that noise (each figure is one window: on a GPT study the batch-64 finalist's read
from 27% below to 24% above its rounds' mean, and with the figures taken as true the forecast
gave one finalist the lead in 97% of its studies where the other led every round; 2026-12-07);
after each round (``after_round``), the rounds run so far are kept as they were and only the
rounds after them are drawn, at the finalists' means so far and the spread their log ratios
showed (the windows' noise counted as a prior of PRIOR_DF degrees of freedom, so that two
rounds that happened to agree do not promise the rest will). Each simulated study is decided
by the same code as a real one (simulate.study: selection, stop rule, export); the
expectation is their mean. What is not drawn: the search's race and the same-training group
(simulate.py says why), so a study with a same-training answer may run past the expectation
by that group's rounds; the budget bounds both.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from optuna.trial import FrozenTrial

from autotune.search.confirmation.selection import Selection
from autotune.search.confirmation.simulate import Noise, Setting, simulate, study
from autotune.search.round_spread import DEVICE_SPREAD, MAX_ROUNDS, RoundSpread
from autotune.search.setup import StudySetup

#: Simulated studies per forecast: at 200, the mean rounds of the README's finalists varied by
#: under half a round between seeds, and a forecast of 5 finalists takes about a second on this
#: project's 2-core VM, once per round (each round is 10-30 s of windows).
STUDIES = 200
#: The degrees of freedom the windows' own noise counts for beside the rounds' log ratios.
PRIOR_DF = 2
#: Sets of true speedups drawn per forecast at the search's end, STUDIES // TRUTH_DRAWS
#: simulated studies each.
TRUTH_DRAWS = 50


#: Who led, in a forecast: each set of finalists that led after some round in one simulated
#: study, with the share of studies it was.
Leaders = tuple[tuple[frozenset[int], float], ...]


@dataclass(frozen=True)
class Forecast:
    """Rounds expected in all (those run included), the spread of log ratios they were drawn
    at, the cap (the most rounds the budget and MAX_ROUNDS allow), and, as the search ends,
    which finalists led after some round (``led``: the numerics check vets each leader, so
    its expected cost is theirs, search/console/numerics_cost.py)."""

    rounds: float
    spread: float
    cap: int
    led: Leaders = ()

    def more(self, done: int) -> float:
        return max(0.0, self.rounds - done)


def prior_spread(spread: RoundSpread | None, sel: Selection) -> float:
    """The rounds' log-ratio spread before any round: an earlier confirmation's on this device
    where one was measured; else the windows' own noise (``sel.noise``: a window's standard
    deviation, from their halves) as a ratio of two windows (sqrt(2) times it); else the device kind's prior (round_spread.py),
    which on the README's command said +-16% where its rounds spread 2% (2026-12-06)."""
    if spread is not None and spread.measured:
        return spread.spread
    if sel.noise > 0:
        return math.sqrt(2) * sel.noise
    return spread.spread if spread is not None else DEVICE_SPREAD["cpu"]


def cap_rounds(budget_s: float, round_s: float, done: int = 0, least: int = 0) -> int:
    """The most rounds the confirmation can run: those done, then whole rounds while they end
    within the budget (confirm._stop_reason), at least ``least``, at most MAX_ROUNDS."""
    fit = math.floor(max(0.0, budget_s) / round_s) if round_s > 0 else MAX_ROUNDS
    return min(MAX_ROUNDS, max(least, done + fit))


def quiet(noise: Noise | None = None) -> Noise:
    """The rounds' noise as the forecast draws it: only the spread, no per-process offsets,
    slow windows or drift (what the rounds measure already includes them)."""
    return noise or Noise(spread=0.0, offset=0.0, slow_share=0.0, drift=0.0)


def at_search_end(speedups: Sequence[float], ratio_spread: float, sel: Selection, runs: int,
                  cap: int, seed: int = 0, baseline_at: int | None = None) -> Forecast:
    """The rounds expected before any has run: the finalists' search figures over the
    baseline's (``speedups``), rounds whose log ratios spread ``ratio_spread`` (each window
    half of it in variance), and each simulated study's true speedups drawn around the figures
    at a window's spread (``_truths``). ``baseline_at``: the place of the baseline where it is
    a finalist itself (its speedup is 1.0 by definition, not a window's). ``led`` names the
    finalists by their place in ``speedups`` (0 the first)."""
    rounds, led = _simulated(tuple(round(s, 4) for s in speedups), round(ratio_spread, 4),
                             sel, runs, max(cap, 1), seed, baseline_at)
    return Forecast(rounds, ratio_spread, cap, led)


def _truths(speedups: Sequence[float], window: float, rng: np.random.Generator,
            baseline_at: int | None) -> tuple[float, ...]:
    """One draw of the finalists' true speedups given their search figures: each figure is
    its window over the baseline's, each window off its configuration's speed by ``window``
    in log spread, so the truth is the figure less the finalist's window's error plus the
    baseline's (shared by every figure); the baseline as a finalist stays at 1.0."""
    errors = rng.normal(0.0, window, len(speedups) + 1)
    return tuple(1.0 if i == baseline_at else float(s * math.exp(errors[0] - errors[i + 1]))
                 for i, s in enumerate(speedups))


@functools.lru_cache(maxsize=64)
def _simulated(speedups: tuple[float, ...], ratio_spread: float, sel: Selection, runs: int,
               cap: int, seed: int, baseline_at: int | None = None) -> tuple[float, Leaders]:
    """Mean rounds of STUDIES simulated studies and who led in them, over TRUTH_DRAWS draws
    of the true speedups (cached: a study under a time budget asks again after every trial,
    mostly with the same finalists)."""
    window = ratio_spread / math.sqrt(2)
    rng = np.random.default_rng(seed)
    outcomes = []
    for draw in range(TRUTH_DRAWS):
        setting = Setting(_truths(speedups, window, rng, baseline_at),
                          Noise(window, 0.0, 0.0, drift=0.0), zone=sel.zone,
                          confidence=sel.confidence, runs=runs, max_rounds=cap)
        outcomes += simulate(setting, STUDIES // TRUTH_DRAWS, seed + 1 + draw)
    led = Counter(frozenset(n - 1 for n in o.led) for o in outcomes)  # simulate's 1..k
    return (statistics.fmean(o.rounds for o in outcomes),
            tuple((who, count / len(outcomes)) for who, count in led.items()))


def search_end_forecast(setup: StudySetup, finals: list[FrozenTrial], base: FrozenTrial,
                        sel: Selection, confirm_runs: int, round_s: float) -> Forecast:
    """The confirmation's rounds expected as the search ends (at_search_end): the
    finalists' search figures over the baseline's as their speedups, at the rounds' spread of
    an earlier confirmation on this device where one was measured, else the spread the
    windows' own noise gives a ratio of two of them (sqrt(2) times it), else the device's
    prior; capped by the budget's rounds."""
    trials = list({t.number: t for t in [*finals, base]}.values())
    others = [t for t in trials if t.number != base.number]
    systems = len({t.number for t in finals})
    ratio = prior_spread(setup.round_spread, sel)
    cap = cap_rounds(setup.study.confirm_budget_s, round_s, least=confirm_runs)
    base_figure = float(base.value or 0.0)
    speedups = [float(t.value or 0.0) / base_figure if base_figure else 1.0 for t in others]
    baseline_at = None
    if len(others) < systems:  # the baseline is a finalist itself: 1.00x
        baseline_at = len(speedups)
        speedups.append(1.0)
    if not speedups:
        return Forecast(float(confirm_runs), ratio, cap)
    ahead = at_search_end(speedups, ratio, sel, confirm_runs, cap, baseline_at=baseline_at)
    numbers = [t.number for t in others] + [base.number]  # the baseline last, where appended
    led = tuple((frozenset(numbers[i] for i in who), share) for who, share in ahead.led)
    return dataclasses.replace(ahead, led=led)


def ratio_spread(runs: Mapping[int, Sequence[float | None]], base: int, prior: float) -> float:
    """The spread of the rounds' log ratios so far, pooled over the finalists (each its own
    mean), with ``prior`` counted as PRIOR_DF degrees of freedom."""
    ss, df = PRIOR_DF * prior ** 2, PRIOR_DF
    for n, vals in runs.items():
        if n == base:
            continue
        logs = [math.log(a / b) for a, b in zip(vals, runs[base], strict=False) if a and b]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return math.sqrt(ss / df)


def after_round(runs: Mapping[int, Sequence[float | None]],
                busy: Mapping[int, Sequence[bool]], base: int, prior: float, sel: Selection,
                least: int, cap: int, seed: int = 0) -> Forecast:
    """The rounds expected in all, the rounds in ``runs`` (figures by trial, None where a trial
    was not measured that round; ``busy``: its contended windows) kept as they ran, the later
    ones drawn around each finalist's mean ratio so far at the spread so far."""
    numbers = [n for n in runs if n != base]
    done = len(runs[base])
    spread = ratio_spread(runs, base, prior)
    if not numbers or done >= cap:
        return Forecast(float(done), spread, cap)
    means = []
    for n in numbers:
        ratios = [math.log(a / b) for a, b in zip(runs[n], runs[base], strict=False) if a and b]
        means.append(statistics.fmean(ratios) if ratios else 0.0)
    rng = np.random.default_rng(seed)
    k, window = len(numbers), spread / math.sqrt(2)
    truth = np.array([0.0, *means])
    logs = truth + rng.normal(0.0, window, (STUDIES, cap + 1, k + 1))
    flags = np.zeros((STUDIES, cap + 1, k + 1), dtype=bool)
    for r in range(done):  # round r + 1 as it ran, as ratios to the baseline's window
        b = runs[base][r]
        for i, n in enumerate([base, *numbers]):
            v = runs[n][r]
            if v and b:
                logs[:, r + 1, i] = math.log(v / b)
            flags[:, r + 1, i] = bool(busy.get(n, ())[r:r + 1] and busy[n][r])
    halves = np.full((STUDIES, k + 1), sel.noise)
    setting = Setting(tuple(math.exp(m) for m in means), quiet(), zone=sel.zone,
                      confidence=sel.confidence, runs=least, max_rounds=cap)
    figures = np.exp(logs)
    total = statistics.fmean(study(setting, figures[i], flags[i], halves[i]).rounds
                             for i in range(STUDIES))
    return Forecast(max(total, float(done)), spread, cap)
