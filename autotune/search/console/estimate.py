"""What a study will cost, estimated from the first window of this run (search/console/cost.py
says it and times the run).

The first window of this run (the baseline, on a new study) is timed from the driver's side, start-up, build, warm-up, measurement, ceilings and
profile included, and sets a point estimate for the rest (``Estimate``):

    this run's set-up + trials x that first trial + confirmation + numerics check

A first window read beside another load is measured again (search/contended.py); the later
trials are then counted at one window of it, not at all of them (``_one_window``).

The confirmation is at least ``study.confirm_runs`` rounds of the finalists and the baseline
(no more windows a round than there are trials; the search's own windows order the finalists
but are no round: selection.py says why), then as many as its selection needs where the
finalists lie within the zone of each other (confirm.selection_rounds: their triangle's close
at the spread the rounds are expected to have, search/round_spread.py: an earlier
confirmation's on this device, else the device kind's), and with study.confirm_precision as
many as an interval that narrow needs, never more than its budget allows: the tie-break's
rounds are inside it (before 2026-12-01 a tie got up to half the budget again, and the two
studies that had one ran 35% and 39% past their stated wall time). One finalist clearly ahead
ends the rounds sooner, which is not known before them: the first window's estimate is the
rounds' bound, said as one. As the search ends, the finalists' gaps are known, and the rounds
are those the confirmation's own simulation expects (confirmation/forecast.py). The numerics check runs each finalist and its
reference at the finalist's seed (numerics_cost.REFERENCE_RUNS: the next seeds only where the
finalist lies beyond the one-seed bound), each a start-up and its steps (the first window's
steps: the finalists' are re-estimated as the search ends). A compiled trial's compile time is counted where the first window paid it; where compile is only
searched, each compiled trial adds its own, unknown until one compiles (at most
``window.compile_timeout_s``), and the estimate says so. The first window is the
baseline's, and the finalists are often bigger batches with longer steps, so as the search ends
the phases after it are estimated again from the finalists' own windows (``revised``), and the
confirmation states a round's cost as it starts (rounds.expected_round_s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.core.knobs import KNOBS
from autotune.diagnose.thresholds import CONTENDED_WAIT_S
from autotune.results.trials import (
    baseline_trial,
    finalists,
    same_training_finalists,
)
from autotune.search.checks.scaling import SCALING_ROUNDS
from autotune.search.confirmation.confirm import (
    only_baseline,
    selection_rounds,
    terms,
    trusted_rounds,
)
from autotune.search.confirmation.forecast import Forecast, search_end_forecast
from autotune.search.confirmation.rounds import (
    Rounds,
    expected_round_s,
    figure_window_s,
    raced,
)
from autotune.search.confirmation.selection import Selection, window_sd
from autotune.search.console.numerics_cost import (
    ANSWERS_CHECKED,
    REFERENCE_RUNS,
    expected_check_s,
    numerics_run_s,
)
from autotune.search.console.progress import clock_text
from autotune.search.contended import BusyMachine
from autotune.search.round_spread import RoundSpread, expected_rounds
from autotune.search.setup import StudySetup


def compile_searched(setup: StudySetup) -> bool:
    """Whether some trial may compile though the first one did not."""
    domain = setup.space.domains.get("compile")
    return domain is not None and any(v not in (None, "off") for v in domain.values)


@dataclass
class Estimate:
    """The point estimate made from the first window of this run."""

    setup_s: float  # this run's start to its first trial's start
    trial_s: float  # the first trial, as the driver waited for it
    trials: int
    confirm_s: float
    confirm_max_s: float  # the budget's bound, the tie-break's rounds inside it
    numerics_s: float
    compile_unknown: bool
    scaling_s: float = 0.0  # launch.scaling's rounds: all ranks and one rank, each a window
    # The first trial's window was contended and measured this many more times; ``each_s`` is
    # then one window of it, its re-measurements and their waits taken out.
    remeasured: int = 0
    each_s: float | None = None
    # ... and while the load stays, the trials measured again as it was before BusyMachine
    # takes windows once: their re-measurements and waits.
    remeasure_s: float = 0.0
    # The confirmation's rounds expected at the spread its rounds are taken to have, and a
    # round's time: said, because the confirmation is where an estimate misses most.
    confirm_rounds: int = 0
    round_s: float = 0.0
    spread: RoundSpread | None = None
    # The same-training trial after the search (search/loop/same_training.py): one more window
    # where the space lets the best change what is trained. It is the search's time: left
    # out, a 5-trial study's search ran 21% over its estimate (test_cost, idle, 2026-12-01).
    same_training: int = 0

    @property
    def trial_each_s(self) -> float:
        """A later trial's time: one window (the first trial's, less its re-measurements)."""
        return self.trial_s if self.each_s is None else self.each_s

    @property
    def total_s(self) -> float:
        return sum(self.phases().values())

    def phases(self) -> dict[str, float]:
        """Each phase's share of the estimate, under the names ``CostClock.phase`` marks."""
        search = (self.trial_s + max(0, self.trials - 1 + self.same_training) * self.trial_each_s
                  + self.remeasure_s)
        return {"search": self.setup_s + search,
                "confirmation": self.confirm_s, "numerics check": self.numerics_s,
                "scaling": self.scaling_s}

    def words(self) -> str:
        if self.remeasured:
            parts = [f"the first trial {self.trial_s:.1f} s (its window read beside another load "
                     f"and measured {self.remeasured + 1} times) + {self.trials - 1} more x "
                     f"{self.trial_each_s:.1f} s (one such window; a contended window is "
                     "measured again, a pruned trial ends sooner)"]
            if self.remeasure_s:
                parts.append(f"re-measurements ~{self.remeasure_s:.0f} s (while the load stays, "
                             "until windows are taken once)")
        else:
            parts = [f"{self.trials} trials x {self.trial_s:.1f} s (the first window's own time; "
                     "a pruned trial ends sooner)"]
        if self.same_training:
            parts[0] += (f" + the same-training trial ~{self.trial_each_s:.1f} s (where the "
                         "best changes what is trained)")
        if self.confirm_s:
            parts.append(f"confirmation ~{self.confirm_s:.0f} s ({self._rounds_words()})")
        if self.numerics_s:
            parts.append(f"numerics check ~{self.numerics_s:.0f} s")
        if self.scaling_s:
            parts.append(f"scaling ~{self.scaling_s:.0f} s")
        extra = "; plus each compiled trial's compile time" if self.compile_unknown else ""
        return f"expected wall time ~{clock_text(self.total_s)}: " + " + ".join(parts) + extra

    def brief(self) -> str:
        """The estimate at a glance: the total and each phase's share (``words`` is its
        arithmetic, a detail)."""
        names = {"search": "search", "confirmation": "confirmation at most",
                 "numerics check": "numerics check", "scaling": "scaling"}
        parts = [f"{names[k]} ~{clock_text(v)}" for k, v in self.phases().items() if v >= 0.5]
        more = "; plus compile times" if self.compile_unknown else ""
        return f"expected wall time ~{clock_text(self.total_s)} ({', '.join(parts)}){more}"

    def _rounds_words(self) -> str:
        n, each = self.confirm_rounds, self.round_s
        bound = (f"; at most {self.confirm_max_s:.0f} s, the choice among finalists within "
                 "the zone included")
        if not n or not each:
            return f"at most {self.confirm_max_s:.0f} s"
        at = f" at {self.spread.words()}" if self.spread else ""
        if n * each > self.confirm_s + 1:
            return (f"the budget: {n} rounds of ~{each:.0f} s{at} would take "
                    f"~{n * each:.0f} s{bound}")
        return f"{n} rounds of ~{each:.0f} s{at}{bound}"

    def as_dict(self) -> dict[str, Any]:
        return {"expected_s": round(self.total_s, 1), "first_trial_s": round(self.trial_s, 2),
                "setup_s": round(self.setup_s, 2), "confirm_s": round(self.confirm_s, 1),
                "confirm_max_s": round(self.confirm_max_s, 1),
                "confirm_rounds": self.confirm_rounds,
                **({"round_spread": self.spread.as_dict()} if self.spread else {}),
                "numerics_s": round(self.numerics_s, 1), "scaling_s": round(self.scaling_s, 1),
                "compile_unknown": self.compile_unknown,
                "same_training_trials": self.same_training,
                **({"first_trial_remeasured": self.remeasured,
                    "trial_each_s": round(self.trial_each_s, 2),
                    "remeasure_s": round(self.remeasure_s, 1)} if self.remeasured else {}),
                "words": self.words()}


def estimate(setup: StudySetup, n_trials: int, confirm_runs: int, setup_s: float,
             trial_s: float, first: dict[str, Any]) -> Estimate:
    """The estimate from the first trial's time (``first``: its record, for the window's own
    noise, whether it compiled and whether it was measured again)."""
    # The finalists and the baseline are distinct configurations among the trials.
    windows = max(1, min(setup.study.confirm_top + 1, n_trials))
    noise = window_sd(float((first.get("ceiling_noise") or {}).get("window") or 0.0))
    rounds = _rounds(setup, confirm_runs, noise, windows - 1)
    remeasured, each_s = _one_window(first, trial_s)
    remeasure_s = _remeasure_s(first, n_trials, remeasured, each_s)
    # A confirmation window runs no ceilings, profiles or all-reduce probe (protocol.figure_only).
    window_s = max(each_s - float(first.get("extras_s") or 0.0), 0.0)
    per_round = windows * window_s
    confirm_s = _confirm_s(setup, confirm_runs, rounds, per_round)
    confirm_max_s = max(confirm_s, setup.study.confirm_budget_s)
    numerics_s = (ANSWERS_CHECKED * (1 + REFERENCE_RUNS)
                  * numerics_run_s(first, window_s, setup.study.numerics_steps))
    compiled = str((first.get("knobs") or {}).get("compile") or "off") != "off"
    # One rank alone starts no launcher and no all-reduce: taken as long as the ranks' window.
    scaling_s = 2 * SCALING_ROUNDS * window_s if setup.launch.scaling else 0.0
    return Estimate(setup_s, trial_s, n_trials, confirm_s if confirm_runs else 0.0,
                    confirm_max_s if confirm_runs else 0.0, numerics_s,
                    compile_searched(setup) and not compiled, scaling_s, remeasured,
                    each_s if remeasured else None, remeasure_s, rounds, per_round,
                    setup.round_spread if confirm_runs else None,
                    int(bool(n_trials) and may_change_training(setup)))


def may_change_training(setup: StudySetup) -> bool:
    """Whether the space lets a trial change what is trained (a knob of class training with
    more than one value; batch_size not under study.keep_global_batch, whose every value
    divides the global batch): then the best may, and the same-training trial runs."""
    return any(len(setup.space.domains[k.name].values) > 1 for k in KNOBS
               if k.changes_training and k.name in setup.space.domains
               and not (k.name == "batch_size" and setup.study.keep_global_batch))


def _one_window(first: dict[str, Any], trial_s: float) -> tuple[int, float]:
    """(re-measurements, one window's seconds) of the first trial. A window read beside
    another load is measured again after a wait (search/contended.py), each time a whole
    window; taken as the time of every later trial, that first trial set the estimate 4.5
    times too high beside ``stress-ng --cpu 2`` (test_cost's study measured 0.22 of it,
    2026-11-27), where the later trials' windows, once the machine was found to stay busy,
    were taken once."""
    remeasured = len((first.get("contention") or {}).get("earlier") or [])
    if not remeasured:
        return 0, trial_s
    return remeasured, max(0.0, trial_s - remeasured * CONTENDED_WAIT_S) / (remeasured + 1)


def _remeasure_s(first: dict[str, Any], n_trials: int, remeasured: int, each_s: float) -> float:
    """A first trial that stayed contended through its re-measurements is a load that has not
    passed: taken as staying, the next trials are measured again as often, until
    ``BusyMachine.STAYED_BUSY`` trials in a row have been (then windows are taken once). Beside
    ``stress-ng --cpu 2 --cpu-load 50`` trial 1 was, as trial 0 had been, and the estimate
    without it was 43-44% short (2 runs of test_cost's study, 2026-11-27). A load that passed
    is taken as gone."""
    if not remeasured or not (first.get("contention") or {}).get("contended"):
        return 0.0
    trials = min(BusyMachine.STAYED_BUSY - 1, n_trials - 1)
    return trials * remeasured * (each_s + CONTENDED_WAIT_S)


def _rounds(setup: StudySetup, confirm_runs: int, noise: float, systems: int) -> int:
    """The rounds expected: at least confirm_runs and the selection's first stage, then as
    many as the selection needs where the finalists lie within the zone of each other
    (confirm.selection_rounds, at the rounds' expected spread: round_spread.py), and, where
    study.confirm_precision is asked, as many as an interval that narrow needs."""
    if not confirm_runs:
        return 0
    sel = Selection(setup.study.indifference, setup.study.correct_selection, max(2, systems),
                    noise)
    least = max(confirm_runs, sel.first)
    if setup.round_spread is None:
        return least
    spread = setup.round_spread.spread
    rounds = selection_rounds(spread, sel, least)
    precision = setup.study.confirm_precision
    if precision is not None:
        least = max(least, trusted_rounds(noise, precision))
        rounds = max(rounds, expected_rounds(spread, precision, least))
    return rounds


def _raced_least(race: Rounds, finals: list[FrozenTrial], base: FrozenTrial) -> int:
    """The rounds of the search's race every finalist has (paired with the baseline): the
    confirmation's least rounds count per finalist, so one found late, or the same-training
    one the race never measured, needs all of them. A budgeted README study whose plan
    counted the race's rounds for every finalist ran 17% past its budget (2026-11-29; how much
    of that this count explains was not measured apart)."""
    if base.number not in race.runs:
        return 0
    return min((race.paired(t.number, base.number) if t.number in race.runs else 0
                for t in finals if t.number != base.number), default=0)


def _confirm_s(setup: StudySetup, confirm_runs: int, rounds: float, per_round: float,
               raced_rounds: int = 0, raced_s: float = 0.0) -> float:
    """At least confirm_runs rounds; past them, rounds stop before one would end past the
    budget. Where the search raced (search/loop/race.py), its ``raced_rounds`` count in the least
    rounds and the ``raced_s`` they took in the budget. The search's own windows are no round
    (they made the finalists: selection.py), so every round is the confirmation's time. Past
    the least, whole rounds run while the next one ends within the budget
    (confirm._stop_reason), so a budget-bound confirmation takes the rounds that fit in it, not
    all of it: at 86c598e a GPT study's confirmation took 265 s where this said ~283 s
    (docs/benchmarks.md)."""
    least = max(confirm_runs - raced_rounds, 0)
    wanted = max(rounds - raced_rounds, 0)
    room = max(0.0, setup.study.confirm_budget_s - raced_s)
    fit = math.floor(room / per_round) if per_round > 0 else wanted
    return max(least, min(wanted, fit)) * per_round


def _confirm_most_s(setup: StudySetup, confirm_runs: int, per_round: float,
                    raced_rounds: int = 0, raced_s: float = 0.0) -> float:
    """The most the confirmation can take from here: its least rounds, or the rest of its
    budget (confirm._stop_reason starts no round it expects to end past it). A GPT study's
    budget-bound confirmation ran 4 rounds in 296 s where its rounds' expected 83 s fitted 3
    in the budget, 249 s (2026-12-07): the rounds' own time, not the estimate's, decides."""
    least = max(confirm_runs - raced_rounds, 0) * per_round
    return max(least, setup.study.confirm_budget_s - raced_s)


def revised(setup: StudySetup, study: optuna.Study, confirm_runs: int,
            forecasts: list[Forecast] | None = None,
            most: dict[str, float] | None = None) -> dict[str, float]:
    """The phases after the search, estimated again from the finalists' own windows once they
    are known. The first window is the baseline's, and the finalists are often bigger batches
    with longer steps: in the README's CPU study as 2 ranks (2026-11-27) the numerics check
    was estimated at 34 s from the baseline's batch 32 and took 162 s at the finalists' 128.
    The confirmation's rounds are those its simulation expects from the finalists' search
    figures (forecast.search_end_forecast; appended to ``forecasts`` where given). ``most``,
    where given, takes the most each phase can take: the confirmation's budget, and a numerics
    check of every finalist (each may lead after some round) at one run of yours per batch:
    the expectation weighs the finalists by how often the simulation has each lead, and a GPT
    study whose batch-64 finalist read slowest in the search but led every round spent 270 s
    where ~116 s was expected (2026-12-07, docs/benchmarks.md)."""
    finals = finalists(study, max(1, setup.study.confirm_top))
    base = baseline_trial(study)
    if not finals or base is None:
        return {}
    same = same_training_finalists(study, finals)  # the same-training answer's (confirm.py)
    candidates = finals
    finals = [*finals, *same]
    trials = list({t.number: t for t in [*finals, base]}.values())
    out: dict[str, float] = {}
    ahead: Forecast | None = None
    if confirm_runs and only_baseline(finals, base):  # confirm() runs no rounds then
        out["confirmation"] = 0.0
    elif confirm_runs:
        race, _ = raced(study)  # the search's race: its rounds and seconds count (race.py)
        round_s = expected_round_s(trials)
        sel = terms(setup, trials, len({t.number for t in finals}))  # as confirm() takes them
        ahead = search_end_forecast(setup, finals, base, sel, confirm_runs, round_s)
        if forecasts is not None:
            forecasts.append(ahead)
        least = _raced_least(race, finals, base)
        out["confirmation"] = _confirm_s(setup, confirm_runs, ahead.rounds, round_s, least,
                                         sum(race.seconds))
        if most is not None:
            most["confirmation"] = _confirm_most_s(setup, confirm_runs, round_s, least,
                                                   sum(race.seconds))
    if setup.study.numerics_steps:  # its expectation, from who the simulation says leads
        out["numerics check"] = expected_check_s(setup, study, candidates, same, base,
                                                 ahead.led if ahead else ())
        if most is not None:
            every = ((frozenset(t.number for t in candidates), 1.0),)
            most["numerics check"] = expected_check_s(setup, study, candidates, same, base, every)
    if setup.launch.scaling:
        out["scaling"] = 2 * SCALING_ROUNDS * max(figure_window_s(t) for t in finals)
    if most is not None:
        most.update({name: max(sec, most.get(name, sec)) for name, sec in out.items()})
    return out
