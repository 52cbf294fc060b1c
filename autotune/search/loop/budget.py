"""A study that ends by a time its user set (``study.time_budget_s``).

Users run autotune before every long run and nightly on many workloads, so its own wall time is
part of what it costs them; ``n_trials`` and ``confirm_budget_s`` say how much work to do, not
how long it takes. Under a time budget the study plans in time:

- the search starts a trial only while the next one (this driver's trials so far, on average)
  and what must follow the search still end within the budget. What follows is the numerics
  check, the scaling measurement, the same-training trial where the best changes what is
  trained, and the confirmation: at least ``confirm_runs`` rounds of one finalist and the
  baseline (the fewest it may be cut to), and, where the budget allows, the rounds it would
  take uncut up to ``AFTER_SEARCH_SHARE`` of the budget (each estimated from the finalists'
  own windows, search/console/estimate.revised);
- as the search ends, the confirmation gets what is left after the numerics check and scaling
  are set aside (``confirm_budget_s`` cut to it, a tie's extra rounds included) and as many
  finalists as its least rounds fit (``confirm_top`` down to one), never fewer than
  ``confirm_runs`` rounds: an interval needs them, and a budget too small for them is overrun
  and says so;
- the header states the plan once the first window is timed, the summary what it cut
  (best.yaml ``study.time_budget``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.results.record import study_attrs
from autotune.results.trials import baseline_trial, best_trial, changes_training, finalists
from autotune.search.confirmation.rounds import figure_window_s
from autotune.search.console.estimate import Estimate, revised
from autotune.search.console.progress import clock_text
from autotune.search.setup import StudySetup

log = logging.getLogger("autotune")

#: The share of a time budget kept for the phases after the search where they would use it
#: (more where their least needs it: confirm_runs rounds are never cut). Under a budget of 1.5
#: times its uncut search, the README's study searched 110 s of its 209 s (2026-11-29,
#: benchmarks/time_budget.py): its least rounds, not this share, set what the search got.
AFTER_SEARCH_SHARE = 1 / 3


@dataclass
class After:
    """What the phases after the search need, estimated from the trials so far (seconds)."""

    confirm_least_s: float  # confirm_runs rounds
    confirm_s: float  # the rounds it would take uncut (capped by confirm_budget_s)
    numerics_s: float
    scaling_s: float
    same_training_s: float

    @property
    def fixed_s(self) -> float:
        """The phases the budget does not cut."""
        return self.numerics_s + self.scaling_s + self.same_training_s


def with_deadline(setup: StudySetup) -> StudySetup:
    """The setup with its deadline, as the study starts (unchanged without a budget)."""
    if setup.study.time_budget_s is None:
        return setup
    return dataclasses.replace(setup, deadline=time.monotonic() + setup.study.time_budget_s)


def after_search(setup: StudySetup, study: optuna.Study, trial_s: float) -> After:
    """The phases after the search, from the finalists' windows so far; ``trial_s``: one
    trial's time. The next trial may join the finalists, each of whose least rounds then runs
    its window too, taken as long as the longest finalist's (a same-training finalist made the
    rounds of a 90 s budget's study 10 s longer than the stop before it had counted); where
    the best changes what is trained, the study runs one more trial after the search
    (search/loop/same_training.py). The least confirmation is that of the fewest finalists
    (``confirmation_setup`` cuts them to fit)."""
    runs = setup.study.confirm_runs
    uncut = revised(setup, study, runs)
    least = revised(fewest_finalists(setup, 1), study, runs)
    best, base = best_trial(study), baseline_trial(study)
    same = trial_s if best and base and changes_training(study, best, base) else 0.0
    windows = [figure_window_s(t) for t in finalists(study, max(1, setup.study.confirm_top))]
    joins = runs * max(windows) if runs and windows and "confirmation" in least else 0.0
    return After(least.get("confirmation", 0.0) + joins, uncut.get("confirmation", 0.0) + joins,
                 uncut.get("numerics check", 0.0), uncut.get("scaling", 0.0), same)


def fewest_finalists(setup: StudySetup, top: int) -> StudySetup:
    """The setup of a confirmation of the ``top`` fastest finalists run to its least rounds
    (confirm_budget_s 0: ``confirm_runs`` rounds and no more)."""
    return setup.with_study(confirm_top=top, confirm_budget_s=0.0)


def first_after(setup: StudySetup, est: Estimate) -> After:
    """The phases after the search as the first window foresees them (search/console/estimate.estimate:
    rounds of the finalists and the baseline at that window's time); the least confirmation
    is of one finalist and the baseline, the fewest the budget may cut it to."""
    windows = max(1, min(setup.study.confirm_top + 1, est.trials))
    least = setup.study.confirm_runs * min(2, windows) * est.round_s / windows
    return After(least, max(least, est.confirm_s), est.numerics_s, est.scaling_s,
                 est.trial_each_s)


def search_progress(setup: StudySetup, done: int, n_trials: int) -> float:
    """How far this run's search has gone, 0-1: its trials done of ``n_trials``, or under a
    time budget, where the search stops when its time is spent rather than at its last trial,
    the larger of that and the time the budget has run over its search's part
    (1 - AFTER_SEARCH_SHARE). The race's allowance follows it (search/loop/race.py)."""
    share = done / max(1, n_trials)
    budget = setup.study.time_budget_s
    if setup.deadline is None or not budget:
        return min(1.0, share)
    elapsed = budget - (setup.deadline - time.monotonic())
    return min(1.0, max(share, elapsed / ((1 - AFTER_SEARCH_SHARE) * budget)))


def planned_confirm_s(setup: StudySetup, after: After) -> float:
    """The confirmation the search leaves room for: its least rounds, more up to the share."""
    assert setup.study.time_budget_s is not None
    room = AFTER_SEARCH_SHARE * setup.study.time_budget_s - after.fixed_s
    return max(after.confirm_least_s, min(after.confirm_s, room))


def search_stop(setup: StudySetup, study: optuna.Study, trial_s: list[float]) -> str | None:
    """Why the search stops before its next trial (None: it goes on). ``trial_s``: this
    driver's trials so far, each as it waited for it; the baseline always runs."""
    if setup.deadline is None or not trial_s:
        return None
    each = statistics.fmean(trial_s)
    after = after_search(setup, study, each)
    confirm_s = planned_confirm_s(setup, after)
    left = setup.deadline - time.monotonic()
    if each + after.fixed_s + confirm_s <= left:
        return None
    return (f"the search stops after {len(trial_s)} trial(s) of this run: the next (~{each:.0f} s) "
            f"and what must follow it ({_after_words(after, confirm_s)}) would end past "
            f"study.time_budget_s={setup.study.time_budget_s:g} ({clock_text(max(0.0, left))} left)"
            + _short_of_plan(setup, study, len(trial_s), each, after.fixed_s + confirm_s))


def planned(setup: StudySetup, est: Estimate, fit: int, confirm_s: float) -> dict[str, Any]:
    """The plan as the study keeps it (``budget_plan``), for the search's stop to say where it
    fell short of it: keyed by this run's deadline."""
    after_s = first_after(setup, est).fixed_s + confirm_s
    return {"deadline": setup.deadline, "trials": fit, "trial_s": round(est.trial_each_s, 1),
            "after_s": round(after_s, 1)}


def _short_of_plan(setup: StudySetup, study: optuna.Study, done: int, each: float,
                   after_s: float) -> str:
    """Why the search stops before the trial count the plan stated, where it does: the plan
    counts trials and the phases after the search at the first window's time, and the
    finalists are often bigger batches with longer windows (a README study planned ~12 trials
    and ran 6, its confirmation and numerics check now asking ~106 s where the plan counted
    ~50 s, 2026-11-29)."""
    plan_ = study_attrs(study).get("budget_plan") or {}
    if plan_.get("deadline") != setup.deadline or done >= int(plan_.get("trials") or 0):
        return ""
    return (f"; the plan made from the first window counted ~{plan_['trials']} trials of "
            f"~{float(plan_['trial_s']):.0f} s and ~{float(plan_['after_s']):.0f} s after the "
            f"search, where the trials took ~{each:.0f} s and the finalists' own windows ask "
            f"~{after_s:.0f} s after it")


def _after_words(after: After, confirm_s: float) -> str:
    parts = [f"confirmation ~{confirm_s:.0f} s"] if confirm_s else []
    for name, sec in (("numerics check", after.numerics_s), ("scaling", after.scaling_s),
                      ("the same-training trial", after.same_training_s)):
        if sec:
            parts.append(f"{name} ~{sec:.0f} s")
    return ", ".join(parts) or "nothing"


def confirmation_setup(setup: StudySetup, study: optuna.Study) -> StudySetup:
    """As the search ends: the confirmation's budget, cut to what the study's budget leaves
    after the numerics check and scaling, and the time its rounds (a tie's included) end by;
    its finalists cut to the most whose least rounds fit in it (study.confirm_top, down to
    one). Unchanged without a budget."""
    if setup.deadline is None:
        return setup
    uncut = revised(setup, study, setup.study.confirm_runs)
    after_s = uncut.get("numerics check", 0.0) + uncut.get("scaling", 0.0)
    end = setup.deadline - after_s
    room = max(0.0, end - time.monotonic())
    top = setup.study.confirm_top
    while top > 1 and revised(fewest_finalists(setup, top), study,
                              setup.study.confirm_runs).get("confirmation", 0.0) > room:
        top -= 1
    if top < setup.study.confirm_top:
        log.info("the time budget leaves ~%.0f s for the confirmation: its finalists are the "
                 "%d fastest (study.confirm_top=%d), whose %d least rounds fit in it", room, top,
                 setup.study.confirm_top, setup.study.confirm_runs)
    cut = setup.with_study(confirm_budget_s=min(setup.study.confirm_budget_s, math.floor(room)),
                           confirm_top=top)
    return dataclasses.replace(cut, confirm_end=end)


def plan(setup: StudySetup, est: Estimate, n_trials: int) -> tuple[int, float, str]:
    """(trials that fit, the confirmation's planned seconds, the plan in words), from the
    first window's estimate: said once it is known, so the user sees what the budget buys
    before most of it is spent."""
    assert setup.study.time_budget_s is not None
    after = first_after(setup, est)
    # Whole seconds, never below the least rounds' cost (they are never cut): a floor below it
    # let the trials fill the fraction of a second the rounds then overran by (183.4 s for a
    # 183 s budget once the search's windows were no longer a round).
    confirm_s = float(max(math.floor(planned_confirm_s(setup, after)),
                          math.ceil(after.confirm_least_s)))
    first_s = est.trial_each_s
    room = setup.study.time_budget_s - est.setup_s - after.fixed_s - confirm_s
    fit = max(1, min(n_trials, int(room // first_s) if first_s > 0 else n_trials))
    trials = (f"~{fit} trial(s) of ~{first_s:.0f} s" if fit >= n_trials else
              f"~{fit} of the {n_trials} trials asked fit at ~{first_s:.0f} s each (a trial starts "
              "while it and what must follow it fit; a pruned one ends sooner)")
    cut = []
    if setup.study.confirm_runs and confirm_s < after.confirm_s:
        cut.append(f"the confirmation to ~{confirm_s:.0f} s (uncut: "
                   f"~{after.confirm_s:.0f} s)")
    over = est.setup_s + fit * first_s + after.fixed_s + confirm_s - setup.study.time_budget_s
    words = (f"time budget {clock_text(setup.study.time_budget_s)} (study.time_budget_s): {trials}, "
             f"then {_after_words(after, confirm_s)}; "
             + (f"it cuts {' and '.join(cut)}" if cut else "nothing cut"))
    if over > 1:
        words += (f"; the least a trusted answer needs (the baseline, "
                  f"{setup.study.confirm_runs} confirmation rounds, the numerics check) ends "
                  f"~{clock_text(over)} past it")
    return fit, confirm_s, words


def record(setup: StudySetup, study: optuna.Study, measured_s: float,
           confirming: StudySetup | None = None) -> dict[str, Any] | None:
    """best.yaml's ``study.time_budget``: the budget, the wall time measured, and what it cut
    (the search's stop, in a worker's words, and the confirmation's budget)."""
    if setup.study.time_budget_s is None:
        return None
    asked_confirm_s = setup.study.confirm_budget_s
    stop = study_attrs(study).get("budget_stop") or {}
    stopped = stop.get("words") if stop.get("deadline") == setup.deadline else None
    cut = [stopped] if stopped else []
    conf = study_attrs(study).get("confirmation") or {}
    given = conf.get("budget_s")
    if given is not None and float(given) < asked_confirm_s - 0.5:
        cut.append(f"the confirmation's budget {asked_confirm_s:g} s -> {float(given):.0f} s")
    if confirming is not None and conf and confirming.study.confirm_top < setup.study.confirm_top:
        cut.append(f"its finalists to the {confirming.study.confirm_top} fastest "
                   f"(study.confirm_top={setup.study.confirm_top})")
    words = (f"{clock_text(measured_s)} of {clock_text(setup.study.time_budget_s)} "
             f"({100 * measured_s / setup.study.time_budget_s:.0f}%)"
             + (f"; cut: {'; '.join(cut)}" if cut else "; nothing cut"))
    return {"budget_s": setup.study.time_budget_s, "measured_s": round(measured_s, 1),
            "search_stop": stopped, "confirm_budget_s": given,
            "confirm_top": confirming.study.confirm_top if confirming else setup.study.confirm_top,
            "asked_confirm_budget_s": asked_confirm_s, "words": words}
