"""Running a study with one worker in this process, or N worker processes sharing it.

Each worker is a full driver (ask/run/tell) on the shared storage; with ``workers=auto`` on a
multi-GPU node each worker's trials see one GPU through CUDA_VISIBLE_DEVICES. Workers on other
machines are just more ``autotune`` processes pointed at the same PostgreSQL study.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import pickle
import signal
import subprocess
import sys
from typing import Any

import optuna

from autotune.core.console import detail, say
from autotune.core.console import fit as one_line
from autotune.core.distributed import rank_cores
from autotune.core.env import child_environ
from autotune.core.quick_exit import quick_exit
from autotune.measure.launch import CPUS_ENV
from autotune.measure.runner import Interrupted
from autotune.results.compare import REGRESSION_EXIT, compare_studies, verdict
from autotune.results.export import best_document, write_exports
from autotune.results.record import set_study_attrs, study_attrs, trial_attrs
from autotune.results.report_html import write_report
from autotune.results.storage import is_sqlite, open_storage
from autotune.results.trials import counts
from autotune.results.trust import could_not_measure
from autotune.search.checks.numerics import check_numerics, vetting
from autotune.search.checks.scaling import measure_scaling
from autotune.search.confirmation.confirm import confirm
from autotune.search.confirmation.rounds import raced
from autotune.search.console.cost import CostClock, disturbed_words, plan_brief, plan_words
from autotune.search.console.progress import StudyProgress
from autotune.search.console.summary import print_summary
from autotune.search.loop.budget import confirmation_setup, plan, planned, with_deadline
from autotune.search.loop.budget import record as budget_record
from autotune.search.loop.driver import Driver
from autotune.search.loop.failfast import (
    NOTHING_EXPORTED,
    BaselineCrashed,
    crashed_baseline,
    paragraph,
)
from autotune.search.loop.same_training import measure_same_training
from autotune.search.loop.speed_only import fall_back
from autotune.search.round_spread import round_spread
from autotune.search.setup import StopFlag, StudySetup, create_study

log = logging.getLogger("autotune")

#: Exit code of a study that could not measure: its confirmation spent its budget on a machine
#: too busy or too noisy to rank configurations (results/trust.py;
#: docs/guide/troubleshooting.md "Exit codes").
COULD_NOT_MEASURE = 4


def split_trials(n_trials: int, workers: int) -> list[int]:
    return [n_trials // workers + (1 if i < n_trials % workers else 0) for i in range(workers)]


def _exporter(setup: StudySetup, progress: StudyProgress | None = None,
              clock: CostClock | None = None):
    def export(study: optuna.Study, trial: Any) -> None:
        write_exports(study, setup.out_dir, str(setup.storage))
        if progress is not None:
            progress.finished(study, trial)
        estimate = clock.finished(dict(trial_attrs(trial))) if clock is not None else None
        if estimate is not None and clock is not None and setup.deadline is not None:
            fit, confirm_s, words = plan(setup, estimate, clock.n_trials)
            log.info("%s", words)
            set_study_attrs(study, {"budget_plan": planned(setup, estimate, fit, confirm_s)})
            estimate = clock.refit(fit, confirm_s)
        if estimate is not None:  # the first window of this run: the rest is estimated from it
            set_study_attrs(study, {"wall": estimate.as_dict()})
            say(one_line(estimate.brief()))
            detail("%s", estimate.words())

    return export


def run_worker(setup: StudySetup, storage: Any, n_trials: int,
               clock: CostClock | None = None) -> int:
    """One driver in this process. Returns the process exit code."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = create_study(setup, storage)
    progress = StudyProgress(n_trials, setup.out_dir / "trials")

    def on_start(number: int, knobs: dict[str, Any]) -> None:
        progress.started(number, knobs)
        if clock is not None:
            clock.started()

    driver = Driver(setup, study=study, on_trial=_exporter(setup, progress, clock), on_start=on_start)
    with StopFlag() as stop:
        try:
            driver.prepare()
            driver.run(n_trials, stop)
        except Interrupted as exc:
            progress.close()
            write_exports(study, setup.out_dir, str(setup.storage))
            log.warning("interrupted by %s: the running trial was stopped and recorded as "
                        "failed (interrupted); run the same command again to resume", exc)
            return 130 if str(exc) == "SIGINT" else 143
        except BaselineCrashed:
            progress.close()
            write_exports(study, setup.out_dir, str(setup.storage))
            return NOTHING_EXPORTED
        finally:
            progress.close()
    write_exports(study, setup.out_dir, str(setup.storage))
    return 0


def _race_s(earlier: list[tuple[str, dict[str, Any]]]) -> float:
    """The seconds of race rounds a study's earlier runs left in it (study.race)."""
    return sum(float(s) for _, attrs in earlier
               for s in (attrs.get("race") or {}).get("seconds") or [])


def _own_earlier(setup: StudySetup, storage: Any) -> list[tuple[str, dict[str, Any]]]:
    """This study's own record where it ran before (run again with more trials, or resumed
    after its confirmation): its confirmation measured the rounds' spread here."""
    try:
        attrs = study_attrs(optuna.load_study(study_name=setup.name, storage=storage))
    except KeyError:
        return []
    return [("this study's earlier run", dict(attrs))]


def run_study(setup: StudySetup, storage: Any, n_trials: int, workers: int) -> int:
    own = _own_earlier(setup, storage)
    setup = dataclasses.replace(setup, round_spread=round_spread(
        setup.env.device, setup.env.device_name, [*own, *setup.earlier]))
    if setup.study.race and (workers > 1 or not is_sqlite(str(setup.storage))):
        log.info("study.race: the finalists are raced during the search only with one worker "
                 "on the study's own SQLite file; here every round runs after the search")
        setup = setup.with_study(race=False)
    confirm_runs = setup.study.confirm_runs
    raced_before = _race_s(own)  # the race rounds of this study's earlier runs
    clock = CostClock(setup, n_trials, confirm_runs)
    started = datetime.datetime.now()  # Optuna's trial start times are naive local times
    setup = with_deadline(setup)  # the budget counts from here, as the clock does
    say(one_line(plan_brief(setup, n_trials, confirm_runs)))
    detail("%s", plan_words(setup, n_trials, confirm_runs))
    if workers == 1:
        code = run_worker(setup, storage, n_trials, clock)
    else:  # each worker times its own trials: only the whole is measured here
        code = _run_processes(setup, n_trials, workers)
    study = optuna.load_study(study_name=setup.name, storage=storage)
    if code == 0 and n_trials:
        with StopFlag() as stop:
            try:
                measure_same_training(setup, study, stop, _exporter(setup))
            except Interrupted:
                log.warning("the same-training trial was interrupted; run the same command "
                            "again to resume")
                code = 130 if stop.reason == "SIGINT" else 143
    confirming = confirmation_setup(setup, study)  # its budget cut to the time budget's room
    if code == 0 and (revision := clock.revise(study, confirming)):
        log.info("%s", revision)
    if code == 0 and confirm_runs:
        clock.phase("confirmation")
        with StopFlag() as stop:
            try:
                # The numerics check runs on each answer's leader as soon as it leads.
                vet = clock.timed("numerics check", vetting(setup, study, stop)) \
                    if setup.study.numerics_steps else None
                confirm(confirming, study, confirm_runs, confirming.study.confirm_top, stop,
                        vet=vet)
            except Interrupted:
                log.warning("confirmation interrupted; best.yaml keeps the search figures")
                code = 130 if stop.reason == "SIGINT" else 143
    if code == 0 and setup.study.numerics_steps:
        clock.phase("numerics check")
        with StopFlag() as stop:
            try:
                check_numerics(setup, study, stop)
                # Refusals that left an answer slower: its speed-only configuration instead.
                fall_back(setup, study, stop, _exporter(setup), confirming)
            except Interrupted:
                log.warning("numerics check interrupted; best.yaml left unchecked")
                code = 130 if stop.reason == "SIGINT" else 143
    if code == 0 and setup.launch.scaling:
        clock.phase("scaling")
        with StopFlag() as stop:
            try:
                measure_scaling(setup, study, stop)
            except Interrupted:
                log.warning("scaling measurement interrupted; best.yaml has no scaling figure")
                code = 130 if stop.reason == "SIGINT" else 143
    race_s = sum(raced(study)[0].seconds) - raced_before  # this run's race rounds
    set_study_attrs(study, {"wall": clock.record(
        race_s, disturbed_words(study, started, clock.ran("confirmation")))})
    budget = budget_record(setup, study, clock.elapsed(), confirming)
    if budget is not None:
        set_study_attrs(study, {"time_budget": budget})
    write_exports(study, setup.out_dir, str(setup.storage))
    doc = best_document(study, str(setup.storage))
    print_summary(doc, counts(study), setup)
    crashed = crashed_baseline(study)
    if crashed is not None:
        print(f"autotune: error: {paragraph(crashed, setup.out_dir)}", file=sys.stderr)
    if doc is None and code == 0:
        code = NOTHING_EXPORTED  # a study that exports nothing has not succeeded
    unmeasured = could_not_measure(study)
    if unmeasured is not None:
        print(f"autotune: {unmeasured}", file=sys.stderr)
        if code == 0:
            code = COULD_NOT_MEASURE
    return report_and_compare(setup, study, code)


def report_and_compare(setup: StudySetup, study: optuna.Study, code: int) -> int:
    """Write report.html/.md (with the comparison when study.compare_to is set); a regression
    turns a clean exit into REGRESSION_EXIT, for schedulers."""
    cmp = None
    if setup.compare:
        name, url = setup.compare
        cmp = compare_studies(study, name, url, setup.study.regression_pct)
        say(one_line(f"  compared with '{name}': {verdict(cmp)}"))
        detail(f"  compared with '{name}': {verdict(cmp)}")
    elif setup.nightly_missing:
        cmp = {"missing": setup.nightly_missing}
        say(f"  not compared: {setup.nightly_missing}")
    path = write_report(study, setup.out_dir, str(setup.storage), cmp)
    say(f"  report: {path} (and report.md)")
    if cmp and cmp.get("regression") and code == 0:
        return REGRESSION_EXIT
    return code


def _run_processes(setup: StudySetup, n_trials: int, workers: int) -> int:
    """N worker processes; each gets its own GPU when the study runs on CUDA.

    Each worker's setup goes to it through its stdin, never through a file: the setup holds
    the storage URL, password included, and a file in the temporary directory outlives a
    killed study (every ``workers=N`` study used to leave one behind)."""
    procs = []
    for i, n in enumerate(split_trials(n_trials, workers)):
        env = {"CUDA_VISIBLE_DEVICES": str(i)} if setup.env.device == "cuda" else {}
        # Each worker's trials on their own cores (cli/app.ranked sized the space so).
        env[CPUS_ENV] = ",".join(map(str, rank_cores(i, workers)))
        ws = dataclasses.replace(setup, worker_env=env, worker_index=i)
        proc = subprocess.Popen([sys.executable, "-m", "autotune.search.run", str(n)],
                                env=child_environ(), stdin=subprocess.PIPE)
        assert proc.stdin is not None
        try:
            with proc.stdin:  # the worker reads it whole at start; EOF ends its stdin
                proc.stdin.write(pickle.dumps(ws))
        except BrokenPipeError:
            pass  # the worker died before reading: its exit code below says so
        procs.append(proc)

    def forward(signum: int, frame: Any) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = [p.wait() for p in procs]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return max(codes, key=abs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="[w%(process)d] %(message)s")
    ws: StudySetup = pickle.loads(sys.stdin.buffer.read())
    quick_exit(run_worker(ws, open_storage(ws.storage), int(sys.argv[1])))
