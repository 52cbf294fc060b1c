"""What a study will cost, said before its search goes on, and what it cost, said at its end.

A user who pays for GPU hours (or holds a GPU for minutes) decides from this whether the study
as configured fits. Before any window has run nothing says how long a step takes, so the header
states the plan and its caps (``plan_words``); ``CostClock`` times the run (its start, each
trial, each phase after the search) and, once the first window of this run has finished, makes
the point estimate of search/console/estimate.py from it. The summary puts the measured wall
time beside the estimate, phase by phase, so a miss says where it came from; best.yaml keeps
both (``study.wall``).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from optuna.trial import FrozenTrial

from autotune.core.config import sized
from autotune.core.console import detail
from autotune.results.record import study_attrs, trial_attrs
from autotune.search.checks.scaling import SCALING_ROUNDS
from autotune.search.checks.spread import REFERENCE_SEEDS
from autotune.search.confirmation.forecast import Forecast
from autotune.search.console.estimate import Estimate, compile_searched, estimate, revised
from autotune.search.console.progress import clock_text
from autotune.search.setup import StudySetup

T = TypeVar("T")


def plan_words(setup: StudySetup, n_trials: int, confirm_runs: int) -> str:
    """The header's statement, before any window: what the study will run and its caps."""
    w = setup.window
    parts = [f"{n_trials} trial windows (each measures {w.min_measure_seconds:g}-"
             f"{sized(w.measure_seconds):g} s after {sized(w.warmup_steps)} warm-up steps)"]
    top = setup.study.confirm_top
    parts.append("one more trial where the best changes what is trained (its speed and "
                 "numerics knobs at your batch size)")
    if confirm_runs:
        # trials.finalists: the top ones, and up to as many more within FINALIST_BAND; then
        # up to two that train the same model (trials.same_training_finalists).
        parts.append(f"a confirmation of at least {confirm_runs} rounds of up to "
                     f"{max(1, min(2 * top + 3, n_trials + 1))} windows (your configuration "
                     f"and {top} finalist{'s' if top != 1 else ''}, up to {2 * top} where their "
                     "figures are close, and up to 2 that train the same model as yours), at "
                     f"most {setup.study.confirm_budget_s:g} s more"
                     + (" (its first rounds run during the search, as finalists are found: "
                        "study.race)" if setup.study.race else ""))
    if setup.study.numerics_steps:
        parts.append(f"a numerics check ({setup.study.numerics_steps} steps of each configuration "
                     "to export, the next only if one is refused, and your configuration "
                     f"at its batch size at 1 to {REFERENCE_SEEDS} seeds)")
    if setup.launch.scaling:
        parts.append(f"a scaling measurement ({SCALING_ROUNDS} rounds of the winner as all "
                     "ranks and as one rank)")
    if compile_searched(setup):
        parts.append("each compiled trial's compile time (at most "
                     f"{w.compile_timeout_s:g} s)")
    budget = ("" if setup.study.time_budget_s is None else
              f"; study.time_budget_s={setup.study.time_budget_s:g} ({clock_text(setup.study.time_budget_s)}): "
              "the trials and the confirmation are cut to fit it, planned once the first "
              "window is timed")
    return ("expected wall time: " + ", ".join(parts)
            + "; the first window's own time sets the estimate" + budget)


def plan_brief(setup: StudySetup, n_trials: int, confirm_runs: int) -> str:
    """plan_words at a glance: the header's last line."""
    w = setup.window
    low, high = f"{w.min_measure_seconds:g}", f"{sized(w.measure_seconds):g}"
    parts = [f"{n_trials} trial windows of {low if low == high else f'{low}-{high}'} s"]
    if confirm_runs:
        parts.append(f"a confirmation (at most {setup.study.confirm_budget_s:g} s)")
    if setup.study.numerics_steps:
        parts.append("a numerics check")
    if setup.launch.scaling:
        parts.append("a scaling measurement")
    budget = ("" if setup.study.time_budget_s is None else
              f", all within study.time_budget_s={setup.study.time_budget_s:g}")
    return f"  expected: {', '.join(parts)}{budget}; timed from the first window"


class CostClock:
    """Times this run: its start, its trials (the driver's on_start/on_trial hooks), and its
    end. ``first_estimate`` is set when the first whole window of the run has finished: on a
    new study the baseline; on a resumed one, not a pruned, failed or copied trial, which would
    say little of the others."""

    def __init__(self, setup: StudySetup, n_trials: int, confirm_runs: int):
        self.setup, self.n_trials, self.confirm_runs = setup, n_trials, confirm_runs
        self.t0 = time.monotonic()
        self.first_start: float | None = None
        self.trial_start: float | None = None
        self.first_estimate: Estimate | None = None
        self.marks: list[tuple[str, float]] = [("search", self.t0)]
        self.nested: list[tuple[str, str, float]] = []  # (phase, the phase it ran inside, s)
        self.revised: dict[str, float] = {}
        self.search_end_s: float | None = None  # the whole study's time stated as the search ended
        self.search_end_most_s: float | None = None  # the most it can take, stated then
        self._first: tuple[float, float, dict[str, Any]] = (0.0, 0.0, {})

    def revise(self, study: optuna.Study, setup: StudySetup | None = None) -> str | None:
        """As the search ends: the phases after it, from the finalists' own windows, in words
        for the log (None when there is nothing to revise); ``setup``: the confirmation's, where
        a time budget cut its budget."""
        if self.first_estimate is None:
            return None
        ahead: list[Forecast] = []
        most: dict[str, float] = {}
        self.revised = revised(setup or self.setup, study, self.confirm_runs, ahead, most)
        if not self.revised:
            return None
        now = self.elapsed()
        self.search_end_s = now + sum(self.revised.values())
        self.search_end_most_s = now + sum(most.values())
        parts = [f"{name} ~{sec:.0f} s" for name, sec in self.revised.items()]
        if ahead and "confirmation" in self.revised:
            parts[0] += f" (~{ahead[0].rounds:.0f} rounds)"
            detail("the confirmation's rounds as the search ends: %.1f expected (the mean of its "
                   "simulation, forecast.py: the finalists' search figures as their speedups, "
                   "rounds spread +-%.1f%%), at most %d (the budget)", ahead[0].rounds,
                   100 * ahead[0].spread, ahead[0].cap)
        return (f"expected from here: {', '.join(parts)}; the study ends at "
                f"~{clock_text(self.search_end_s)}, at most ~{clock_text(self.search_end_most_s)} "
                "(the confirmation's whole budget, and the numerics check of every finalist)")

    def phase(self, name: str) -> None:
        """The study moves on to ``name`` (one of Estimate.phases): the summary sets each
        phase's measured time beside its estimate, so a miss says where it came from."""
        self.marks.append((name, time.monotonic()))

    def timed(self, name: str, work: Callable[..., T]) -> Callable[..., T]:
        """``work`` as a part of phase ``name`` that runs inside the current one: the numerics
        check's vetting inside the confirmation's rounds. A GPT study's summary read
        "confirmation 09:08 (~04:55), numerics check 00:00 (~02:43)", its 280 s of vetting
        counted as rounds (2026-12-07)."""
        host = self.marks[-1][0]

        def run(*args: Any) -> T:
            start = time.monotonic()
            try:
                return work(*args)
            finally:
                self.nested.append((name, host, time.monotonic() - start))
        return run

    def phase_seconds(self, race_s: float = 0.0) -> dict[str, float]:
        """Each phase's wall time. ``race_s``, the rounds the search's race ran in this run
        (study.race), is the confirmation's, as the estimate counts it: a raced README study
        read search 210 s against ~118 s expected and confirmation 255 s against 300 s, where
        its trials took 125 s and its race 85 s (2026-11-29)."""
        ends = [t for _, t in self.marks[1:]] + [time.monotonic()]
        out = {name: end - start for (name, start), end in zip(self.marks, ends, strict=True)}
        for name, host, sec in self.nested:
            out[host] -= sec
            out[name] = out.get(name, 0.0) + sec
        if race_s > 0 and "confirmation" in out:
            moved = min(race_s, out["search"])
            out["search"] -= moved
            out["confirmation"] += moved
        return out

    def _expected_words(self, name: str, first: dict[str, float]) -> str:
        words = f"~{clock_text(first.get(name, 0.0))}"
        if name in self.revised:
            words += f", ~{clock_text(self.revised[name])} from the finalists"
        return words

    def started(self) -> None:
        self.trial_start = time.monotonic()
        if self.first_start is None:
            self.first_start = self.trial_start

    def finished(self, record: dict[str, Any]) -> Estimate | None:
        """The estimate, when the first whole window finishes (None before and after)."""
        if self.first_estimate is not None or self.trial_start is None or self.first_start is None:
            return None
        if record.get("outcome") != "ok" or record.get("duplicate_of") is not None:
            return None
        self._first = (self.first_start - self.t0, time.monotonic() - self.trial_start, record)
        self.first_estimate = estimate(self.setup, self.n_trials, self.confirm_runs, *self._first)
        return self.first_estimate

    def refit(self, n_trials: int, confirm_budget_s: float) -> Estimate | None:
        """The first estimate again for a plan cut to a time budget (search/loop/budget.py),
        its confirmation of the most finalists whose least rounds fit in ``confirm_budget_s``,
        as budget.confirmation_setup will cut them: counted at study.confirm_top's, a budgeted
        README study's least rounds (4 windows of 5 s, 3 times) said ~64 s where its plan gave
        the confirmation 32 s, and its estimate, 204 s, exceeded its own 183 s budget
        (2026-11-29)."""
        if self.first_estimate is None:
            return None
        top = self.setup.study.confirm_top
        while True:
            cut = self.setup.with_study(confirm_budget_s=confirm_budget_s, confirm_top=top)
            self.first_estimate = estimate(cut, n_trials, self.confirm_runs, *self._first)
            if top <= 1 or self.first_estimate.confirm_s <= confirm_budget_s:
                return self.first_estimate
            top -= 1

    def ran(self, name: str) -> bool:
        """Whether this run reached the phase ``name``."""
        return any(mark == name for mark, _ in self.marks)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def record(self, race_s: float = 0.0, disturbed: str = "") -> dict[str, Any]:
        """best.yaml's ``study.wall``: measured beside expected, and both in words (``race_s``:
        the race's rounds of this run, counted in the confirmation: ``phase_seconds``;
        ``disturbed``: disturbed_words, the windows that ran beside other work)."""
        measured = self.elapsed()
        out: dict[str, Any] = {"measured_s": round(measured, 1)}
        if self.first_estimate is not None:
            exp = self.first_estimate.total_s
            out.update(self.first_estimate.as_dict())
            expected = self.first_estimate.phases()
            phases = self.phase_seconds(race_s)
            raced = race_s > 0 and "confirmation" in phases
            out["phases"] = {name: {"measured_s": round(sec, 1),
                                    "expected_s": round(expected.get(name, 0.0), 1),
                                    **({"revised_s": round(self.revised[name], 1)}
                                       if name in self.revised else {}),
                                    **({"race_s": round(race_s, 1)}
                                       if raced and name == "confirmation" else {})}
                             for name, sec in phases.items()}
            each = ", ".join(f"{name} {clock_text(sec)} ({self._expected_words(name, expected)}"
                             + (f"; {clock_text(race_s)} of it raced during the search"
                                if raced and name == "confirmation" else "") + ")"
                             for name, sec in phases.items())
            stated = [f"~{clock_text(exp)} after the first window ({100 * (measured / exp - 1):+.0f}%)"]
            out["brief"] = f"{clock_text(measured)} measured, ~{clock_text(exp)} expected"
            if self.search_end_s:
                end = self.search_end_s
                out["search_end_s"] = round(end, 1)
                most = self.search_end_most_s or end
                out["search_end_most_s"] = round(most, 1)
                stated.insert(0, f"~{clock_text(end)} at the search's end "
                                 f"({100 * (measured / end - 1):+.0f}%; at most "
                                 f"~{clock_text(most)})")
                out["brief"] = f"{clock_text(measured)} measured, ~{clock_text(end)} expected"
            out["words"] = (f"{clock_text(measured)} measured, expected {', '.join(stated)}: {each}"
                            + (f"; {disturbed}" if disturbed else ""))
        else:
            # several worker processes (each times its own trials), or no trial ran
            out["words"] = f"{clock_text(measured)} measured"
        return out


def disturbed_words(study: optuna.Study, since: datetime.datetime, confirmed: bool) -> str:
    """The windows of this run (trials started at ``since`` or later, and the confirmation's
    rounds where it ran one: ``confirmed``) that ran beside other work, in words ("" where
    none did): a wall time past its estimate says where the difference may come from. A
    README study read +43% on a busy CI machine where its same-training trial's window lost
    5% to steal and was measured again, 8 s the summary did not explain (2026-12-02)."""
    again, kept = 0, 0
    for t in study.get_trials(deepcopy=False):
        if not _this_run(t, since):
            continue
        load = trial_attrs(t).get("contention") or {}
        again += len(load.get("earlier") or [])
        kept += bool(load.get("contended"))
    record = (study_attrs(study).get("confirmation") or {}) if confirmed else {}
    rounds = sum(sum(bool(b) for b in busy) for busy in (record.get("contended") or {}).values())
    parts = []
    if again:
        parts.append(f"{again} search window{'s' * (again > 1)} read beside other work and "
                     "measured again (each reading's time is in the search's)")
    if kept:
        parts.append(f"{kept} search window{'s' * (kept > 1)} kept as read beside other work")
    if rounds:
        parts.append(f"{rounds} confirmation window{'s' * (rounds > 1)} beside other work "
                     "(left out of the comparisons; the rounds went on until they had quiet "
                     "ones, or the budget)")
    return ("beside other work: " + ", ".join(parts)) if parts else ""


def _this_run(t: FrozenTrial, since: datetime.datetime) -> bool:
    return t.datetime_start is not None and t.datetime_start >= since
