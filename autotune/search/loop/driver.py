"""The Optuna driver: ask -> run one window in a subprocess -> tell, with resume.

One ``Driver`` is one worker. Several workers (processes, or machines) may share a study on an
RDB storage: each asks its own trials, marks them with its owner and a heartbeat, and any
worker that starts reaps trials left RUNNING by a dead one (``driver_lost``) and re-runs their
configuration once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.console import detail
from autotune.core.space import Space
from autotune.diagnose.verdicts import diagnose
from autotune.measure.launch import CPUS_ENV, start_server
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.runner import Interrupted, Watch, run_window
from autotune.results.compare import versions
from autotune.results.record import (
    TrialAttrs,
    set_study_attrs,
    set_trial_attrs,
    trial_attrs,
)
from autotune.results.trials import baseline_trial, best_value, finalists, study_unit
from autotune.search.contended import BusyMachine, measure_settled
from autotune.search.loop import agent
from autotune.search.loop.budget import search_progress, search_stop
from autotune.search.loop.conditions import record_conditions
from autotune.search.loop.failfast import BaselineCrashed, crashed_baseline, paragraph, supersede
from autotune.search.loop.ownership import copy_twin, owner, reap_lost_trials, stored_trial, twin_of
from autotune.search.loop.race import race_round
from autotune.search.loop.window_record import window_attrs, write_loader_profile
from autotune.search.pruning import (
    cache_ceilings,
    cached_ceilings,
    cached_noise,
    ceiling_verdict,
    ceiling_violations,
    distrust_ceilings,
    window_pruner,
)
from autotune.search.setup import StopFlag, StudySetup, create_study
from autotune.search.units import in_study_unit, over_limit, result_line

log = logging.getLogger("autotune")

HEARTBEAT_S = 10.0


class Driver:
    def __init__(self, setup: StudySetup, study: optuna.Study | None = None,
                 on_trial: Callable[[optuna.Study, FrozenTrial], None] | None = None,
                 on_start: Callable[[int, dict[str, Any]], None] | None = None):
        self.setup = setup
        self.study = study or create_study(setup)
        self.on_trial = on_trial
        self.on_start = on_start  # (number, knobs) as a trial starts: live progress
        self.trials_dir = setup.out_dir / "trials"
        self.busy = BusyMachine()
        self._told: dict[int, set[int]] = {}  # trial number -> steps reported (pruning_check)

    # -- setup --------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Record the study's context, reap dead drivers' trials, enqueue the baseline."""
        s, study = self.setup, self.study
        record_conditions(study, s)
        reaped = reap_lost_trials(study)
        if reaped:
            log.warning("trials %s were left RUNNING by a driver that died: marked failed "
                        "(driver_lost), their configurations queued again", reaped)
        crashed = crashed_baseline(study)
        if crashed is not None:  # resumed after a crashed baseline: the user may have fixed it
            log.info("the baseline (trial %d) crashed last time: running it again", crashed.number)
            supersede(study, crashed)
        if not study.get_trials(deepcopy=False) or crashed is not None:
            study.enqueue_trial(s.space.searched(s.space.baseline),
                                user_attrs=dict(TrialAttrs(source="baseline")), skip_if_exists=crashed is None)
            if s.start_knobs and crashed is None:  # study.start_from: the earlier best next
                # (skipped when it is the baseline's configuration: trial 0 measures it)
                study.enqueue_trial(s.space.searched(s.space.baseline | s.start_knobs),
                                    user_attrs=dict(TrialAttrs(source="start_from")), skip_if_exists=True)
        set_study_attrs(study, {"versions": versions()})
        start_server()

    # -- the loop -----------------------------------------------------------------------------
    def run(self, n_trials: int, stop: StopFlag | None = None) -> int:
        """Run up to ``n_trials`` trials; return how many this worker finished."""
        stop = stop or StopFlag()
        start, done = time.monotonic(), 0
        trial_s: list[float] = []  # this driver's trials, each as it waited for it
        while done < n_trials:
            if self.setup.study.timeout_s is not None and time.monotonic() - start > self.setup.study.timeout_s:
                log.info("study.timeout_s=%s reached; stopping", self.setup.study.timeout_s)
                break
            why = search_stop(self.setup, self.study, trial_s)
            if why:
                log.info("%s", why)
                # Keyed by this run's deadline: a resumed study's earlier stop is not this run's.
                set_study_attrs(self.study, {"budget_stop": {"deadline": self.setup.deadline,
                                                             "words": why}})
                break
            if stop.reason:
                raise Interrupted(stop.reason)
            crashed = crashed_baseline(self.study)
            if crashed is not None:  # the user's own settings do not train: nothing will
                raise BaselineCrashed(paragraph(crashed, self.setup.out_dir))
            began = time.monotonic()
            self.before_ask()
            told = self.run_one(stop)
            # The trial alone: a race round after it is the confirmation's time, planned as
            # such (with it, a budgeted raced study took its trials for 15 s where they took
            # 9-11 s, and stopped its search with a fifth of its budget unspent, 2026-11-29).
            trial_s.append(time.monotonic() - began)
            # A close finalist: one round at once, as far as the race's allowance goes by now.
            race_round(self.setup, self.study, told, stop,
                       progress=search_progress(self.setup, done + 1, n_trials))
            done += 1
        return done

    def before_ask(self) -> None:
        # Another worker may have died since: its trials are re-run now, not at the next start.
        if reap_lost_trials(self.study):
            log.warning("re-queued the configurations of trials left by a dead worker")
        if self.setup.study.agent:
            agent.enqueue(self.study, self.setup.space)

    def run_one(self, stop: StopFlag) -> FrozenTrial:
        s, study = self.setup, self.study
        trial = study.ask()
        # First: other workers may reap it.
        set_trial_attrs(trial, {**owner(s.worker_env.get(CPUS_ENV)), "heartbeat": time.time()})
        knobs = s.space.suggest(trial)
        set_trial_attrs(trial, {"knobs": knobs})
        set_trial_attrs(trial, {"source": trial_attrs(trial).get("source", "sampler")})

        detail("%s", trial_words(trial.number, trial_attrs(trial)["source"], knobs, s.space))
        if self.on_start is not None:
            self.on_start(trial.number, {k: v for k, v in knobs.items() if k not in s.space.fixed})
        twin = twin_of(study, knobs, trial.number)
        if twin is not None:
            return self._copy_twin(trial, twin)
        set_trial_attrs(trial, {"measuring": True})

        known = cached_ceilings(study, knobs)
        why = (ceiling_verdict(known, best_value(study), cached_noise(study, knobs),
                               study_unit(study)) if s.study.prune else None)
        if why:  # a cached ceiling already rules it out: costs no window at all
            return self.tell(trial, WindowResult(outcome="pruned", error=why, ceilings=known))

        req = TrialRequest(
            workload=s.workload_spec, knobs=knobs, device=s.env.device, window=s.window,
            seed=s.seed, cpu_sized=s.cpu_sized, trace=s.window.profile,
            env=s.trial_env, ceilings={k: k not in known for k in ("loader", "compute")},
            grad_accum=s.grad_accum(knobs), launch=s.ranks,
            loader_profile=s.window.loader_profile,
        )
        last_beat = [time.monotonic()]

        def tick() -> str | None:
            if stop.reason:
                return stop.reason
            if time.monotonic() - last_beat[0] > HEARTBEAT_S:
                last_beat[0] = time.monotonic()
                set_trial_attrs(trial, {"heartbeat": time.time()})
            return None

        try:
            result = measure_settled(
                lambda r, d: self.measure(r, d, on_progress=self.pruning_check(trial),
                                          stop_requested=tick), req,
                self.trials_dir / str(trial.number), f"trial {trial.number}", tick,
                retries=self.busy.retries(self.setup.study.remeasure_contended))
            self.busy.saw(result)
        except Interrupted as exc:
            self._record(trial, WindowResult(outcome="interrupted", error=f"driver got {exc}"))
            self._after(study.tell(trial, state=TrialState.FAIL))
            raise
        except Exception as exc:
            # A fault of the driver itself (a bug, a storage error): the window is already
            # dead (run_window kills it on any exit). Record why, so the trial is not left
            # RUNNING for other workers to wait on, and let the error reach the user.
            self._fail_on_driver_error(trial, exc)
            raise
        try:
            return self.tell(trial, result)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker reaped it (its heartbeat looked stale: a suspended host, a stalled
            # storage). Its configuration was re-queued there; this measurement is dropped.
            log.warning("trial %d was failed by another worker while it ran; result dropped",
                        trial.number)
            return stored_trial(self.study, trial.number)

    def measure(self, req: TrialRequest, trial_dir: Path,
                on_progress: Callable[[Watch], str | None] | None,
                stop_requested: Callable[[], str | None]) -> WindowResult:
        """Run one trial's window. The one place a trial is measured, so that a benchmark
        (benchmarks/strategies.py) can serve a stored measurement of the same request."""
        return run_window(req, trial_dir, on_progress=on_progress, stop_requested=stop_requested)

    def _fail_on_driver_error(self, trial: optuna.Trial, exc: Exception) -> None:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        try:
            self._record(trial, WindowResult(outcome="driver_error", error=why))
            self.study.tell(trial, state=TrialState.FAIL)
        except Exception:  # noqa: BLE001 - storage unreachable: the next run reaps it
            log.warning("trial %d could not be marked failed; the next run will reap it as "
                        "driver_lost", trial.number)

    def pruning_check(self, trial: optuna.Trial) -> Callable[[Watch], str | None] | None:
        """While the window runs: why to stop it (pruning.window_pruner), or None when the
        study does not prune. The steps told to Optuna are kept per trial, across a window
        measured again."""
        if not self.setup.study.prune:
            return None
        return window_pruner(self.study, trial, self._told.setdefault(trial.number, set()))

    def tell(self, trial: optuna.Trial, result: WindowResult) -> FrozenTrial:
        s = self.setup
        result = in_study_unit(self.study, result)
        knobs = trial_attrs(trial)["knobs"]
        if result.ceilings and not result.contention.get("contended"):
            cache_ceilings(self.study, knobs, result.ceilings, result.ceiling_noise)
        ceilings = {**cached_ceilings(self.study, knobs), **result.ceilings}
        noise = {**cached_noise(self.study, knobs), **result.ceiling_noise}
        set_trial_attrs(trial, {"ceilings": ceilings})
        set_trial_attrs(trial, {"ceiling_noise": noise})
        beaten = (ceiling_violations(result.rate, ceilings, noise, result.unit)
                  if result.ok else {})
        if beaten:  # an upper bound that a trial beat was mismeasured: never prune on it
            distrust_ceilings(self.study, knobs, beaten)
            set_trial_attrs(trial, {"ceiling_violation": "; ".join(beaten.values())})
            detail("trial %d %s", trial.number, "; ".join(beaten.values()))
        if ceilings and result.outcome == "ok":
            set_trial_attrs(trial, {"fraction_of_ceiling":
                                    result.rate / min(ceilings.values())})
        if result.outcome == "ok":
            set_trial_attrs(trial, {"diagnosis": diagnose(
                result, knobs, s.env.device, s.memory_limit_gb, image_inputs=s.image_inputs,
                domains=s.space.domains)})
        self._record(trial, result)
        if result.outcome == "ok":
            if result.peak_memory_gb > s.memory_limit_gb:  # infeasible: say why, rank named
                set_trial_attrs(trial, {"reason": "over the memory limit: "
                                        + over_limit(result, s.memory_limit_gb)})
            trial.set_constraint("peak_memory_gb", result.peak_memory_gb - s.memory_limit_gb)
            value = s.objective(result, knobs)
            if s.study.run_steps:
                set_trial_attrs(trial, {"effective_samples_per_sec": value})
            frozen = self.study.tell(trial, value)
        elif result.outcome == "oom":
            # Infeasible, not failed: the sampler learns where the memory boundary lies.
            used = max(result.peak_memory_gb, s.memory_limit_gb)
            trial.set_constraint("peak_memory_gb", max(used - s.memory_limit_gb, 0.01))
            frozen = self.study.tell(trial, 0.0)
        elif result.outcome == "pruned":
            frozen = self.study.tell(trial, state=TrialState.PRUNED)
        else:
            frozen = self.study.tell(trial, state=TrialState.FAIL)
        for line in outcome_words(trial.number, result, s.memory_limit_gb,
                                  trial_attrs(trial).get("diagnosis")):
            detail("%s", line)
        self._keep_finalists_traces()
        self._after(frozen)
        return frozen

    def _keep_finalists_traces(self) -> None:
        """Keep the Chrome traces of the trials that may be exported (the confirmation's
        finalists so far, by search figure, and the baseline, exported when no finalist's
        speedup is supported); delete the others' (tens of MB each on a GPU). Their summaries
        stay in the study. write_exports publishes best_trace.json."""
        base = baseline_trial(self.study)
        keep = {t.number for t in finalists(self.study, self.setup.study.confirm_top)}
        keep |= {base.number} if base is not None else set()
        for trace in self.trials_dir.glob("*/trace.json"):
            if not trace.parent.name.isdigit() or int(trace.parent.name) not in keep:
                trace.unlink(missing_ok=True)

    def _copy_twin(self, trial: optuna.Trial, twin: FrozenTrial) -> FrozenTrial:
        """Same knobs as an earlier trial: its outcome is reused (ownership.copy_twin)."""
        frozen = copy_twin(self.study, trial, twin)
        detail("trial %d: same knobs as trial %d, outcome reused", trial.number, twin.number)
        self._after(frozen)
        return frozen

    def _record(self, trial: optuna.Trial, r: WindowResult) -> None:
        set_trial_attrs(trial, window_attrs(r, study_unit(self.study)))
        write_loader_profile(r, self.trials_dir / str(trial.number))

    def _after(self, frozen: FrozenTrial) -> None:
        if self.on_trial is not None:
            self.on_trial(self.study, frozen)


def trial_words(number: int, source: str, knobs: dict[str, Any], space: Space) -> str:
    """The line a trial starts with: its number, why it was asked, the knobs searched (the
    documentation's excerpts are checked against it: tests/test_docs_excerpts.py)."""
    return f"trial {number} ({source}): {_short(knobs, space)}"


def outcome_words(number: int, result: WindowResult, limit: float,
                  diagnosis: dict[str, Any] | None) -> list[str]:
    """The lines a trial ends with: what its window measured, and what limits it."""
    lines = [f"trial {number}: {result_line(result, limit)}"]
    if diagnosis:
        lines.append(f"  diagnosis: {diagnosis.get('summary', diagnosis.get('bottleneck'))}")
    return lines


def _short(knobs: dict[str, Any], space: Space) -> str:
    fixed = space.fixed
    return " ".join(f"{k}={v}" for k, v in knobs.items() if k not in fixed)
