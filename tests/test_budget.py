"""A study under study.time_budget_s: planned to fit once its first window is timed, its search
stopped where the next trial and what must follow it would end past the budget, its
confirmation's budget cut to what is left, and what it cut said in the summary and best.yaml."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from autotune.core.env import Env
from autotune.search.console.estimate import estimate
from autotune.search.loop.budget import AFTER_SEARCH_SHARE, plan
from autotune.search.setup import StudySetup
from tests.conftest import TINY_WINDOW, ran_to_the_end, run_cli, study_setup


def _setup(env: Env, budget_s: float, **kw: object) -> StudySetup:
    setup: StudySetup = study_setup(env, time_budget_s=budget_s, confirm_runs=3, confirm_top=3,
                                    numerics_steps=10)
    return dataclasses.replace(setup, **kw)  # type: ignore[arg-type]


def test_the_plan_fits_the_trials_and_the_confirmation_to_the_budget(cpu_env: Env) -> None:
    # A first window of 6 s (1 s of it ceilings and profiles), 40 trials asked, 300 s of
    # confirmation asked: 4 windows a round at 5 s.
    setup = _setup(cpu_env, 300.0)
    first = {"extras_s": 1.0, "warmup_s": 1.0, "measure_s": 3.0, "step_ms": {"median": 10.0}}
    est = estimate(setup, 40, 3, 2.0, 6.0, first)
    fit, confirm_s, words = plan(setup, est, 40)
    # The least confirmation is 3 rounds of one finalist and the baseline (30 s: the budget
    # may cut the finalists to one); a third of the budget less the numerics check and the
    # same-training trial is more, and the rounds uncut more still.
    fixed = est.numerics_s + est.trial_each_s
    assert confirm_s == int(AFTER_SEARCH_SHARE * 300 - fixed)
    assert 30 < confirm_s < est.confirm_s
    # The trials fill the rest at the first window's time.
    assert fit == int((300 - 2.0 - fixed - confirm_s) // 6.0) < 40
    assert f"~{fit} of the 40 trials asked fit" in words, words
    assert f"the confirmation to ~{confirm_s:.0f} s" in words, words
    assert "past it" not in words
    # A budget too small for the least a trusted answer needs says by how much it overruns.
    fit, confirm_s, words = plan(_setup(cpu_env, 30.0), est, 40)
    assert fit == 1 and confirm_s == 30, (fit, confirm_s)
    assert "past it" in words, words
    # A budget with room for everything cuts nothing.
    fit, _, words = plan(_setup(cpu_env, 10_000.0), est, 40)
    assert fit == 40 and "nothing cut" in words, words


def test_the_wall_time_a_plan_states_fits_in_its_budget(cpu_env: Env) -> None:
    """The estimate said once the plan is made counts the confirmation the plan gives (its
    finalists cut to those whose least rounds fit), not study.confirm_top's least rounds: those
    made a budgeted README study state ~204 s for its 183 s budget (2026-11-29)."""
    from autotune.search.console.cost import CostClock

    setup = _setup(cpu_env, 183.0)
    # The README's baseline on this VM: an 11 s trial, 5.7 s of it ceilings and profiles.
    first = {"outcome": "ok", "extras_s": 5.7, "warmup_s": 1.0, "measure_s": 3.0,
             "step_ms": {"median": 250.0}}
    clock = CostClock(setup, 12, 3)
    clock._first = (0.2, 11.0, first)
    clock.first_estimate = estimate(setup, 12, 3, *clock._first)
    fit, confirm_s, _ = plan(setup, clock.first_estimate, 12)
    est = clock.refit(fit, confirm_s)
    assert est is not None and fit < 12
    # The plan takes whole seconds, never below the least rounds (of one finalist here), which
    # are never cut; past them whole rounds run while the next one ends within the seconds.
    assert confirm_s - est.round_s < est.confirm_s <= confirm_s + 1.0, (est.confirm_s, confirm_s)
    assert est.total_s <= 183.0, est.words()


def test_the_confirmation_gets_what_the_deadline_leaves(cpu_env: Env) -> None:
    """As the search ends under a budget: the confirmation's budget is cut to the seconds left
    and its rounds are to end by the deadline; the study's configuration is left as it was."""
    import optuna

    from autotune.search.loop.budget import confirmation_setup

    setup = dataclasses.replace(_setup(cpu_env, 100.0), deadline=time.monotonic() + 60.0)
    cut = confirmation_setup(setup, optuna.create_study(direction="maximize"))
    assert cut.confirm_end is not None and cut.confirm_end <= setup.deadline  # type: ignore[operator]
    assert cut.study.confirm_budget_s <= 60.0 < setup.study.confirm_budget_s
    assert setup.study.confirm_budget_s == 300.0 and setup.confirm_end is None


def test_a_budget_must_be_positive(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "device=cpu", "study.time_budget_s=0"], tmp_path)
    assert proc.returncode == 2 and "study.time_budget_s=0" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_study_under_a_time_budget_stops_its_search_and_cuts_its_confirmation(
        tmp_path: Path) -> None:
    """20 trials of windows of about 3 s and a confirmation of up to 300 s asked, in 50 s: the
    search stops early, the confirmation gets what is left (its least rounds all the same),
    and the summary and best.yaml say what was cut. The workload's loader sleeps per item
    (tests/workloads_diag.TwoAnswersWorkload): DataLoader workers beat the baseline by far on
    any machine, busy or not, so there is a finalist other than the baseline to confirm (the
    agent tries workers after the baseline's input-bound window)."""
    window = [f"window.{k}={v}" for k, v in TINY_WINDOW.items() if k != "min_measure_seconds"]
    proc = run_cli(["workload._target_=tests.workloads_diag.TwoAnswersWorkload", "device=cpu",
                    "knobs.num_workers=[0,2]", "study.name=b", "study.n_trials=20",
                    "study.time_budget_s=50", "study.numerics_steps=2", "study.prune=false",
                    # A window read beside another load is kept, not measured twice more: on
                    # a busy machine the baseline's re-measurements (24 s) left no trial
                    # after it, and nothing to confirm.
                    "study.remeasure_contended=0", "window.min_measure_seconds=1", *window],
                   tmp_path)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    assert "study.time_budget_s=50 (00:50): the trials and the confirmation are cut" in out
    assert "time budget 00:50 (study.time_budget_s): ~" in out, out[-3000:]
    doc = yaml.safe_load((tmp_path / "studies" / "b" / "best.yaml").read_text())
    budget = doc["study"]["time_budget"]
    assert budget["budget_s"] == 50
    assert budget["search_stop"] and "the search stops after" in budget["search_stop"], budget
    assert doc["study"]["trials"] < 20, doc["study"]
    assert f"time budget: {budget['words']}" in out
    conf = doc.get("confirmation") or {}
    # It confirmed: a finalist beside the baseline, measured again in rounds.
    assert set(conf.get("finalists") or []) - {conf.get("baseline_trial")}, (conf, out[-3000:])
    assert conf["budget_s"] < 300 and "300 s ->" in budget["words"], (conf, budget)
    assert conf["rounds"] >= 3, conf  # the least rounds run whatever the budget


def test_a_search_stopped_short_of_its_plan_says_why(tmp_path: Path) -> None:
    """The header's plan counts trials and the phases after the search at the first window's
    time; where the finalists' own windows are longer, the search stops before the plan's
    count, and its stop says so beside both figures (a README study planned ~12 trials and
    ran 6). A stop at or past the plan's count, or another run's plan, adds nothing."""
    import optuna

    from autotune.results.record import set_study_attrs
    from autotune.search.loop.budget import search_stop, with_deadline
    from tests.test_race import _knobs, _setup, _tell

    # 20 s: the next trial and the least confirmation (3 rounds of 4 s windows) do not fit.
    setup = with_deadline(_setup(tmp_path, time_budget_s=20.0, race=False, confirm_runs=3,
                                 numerics_steps=0))
    study = optuna.create_study(direction="maximize")
    knobs = _knobs(setup)
    _tell(study, "base", knobs["base"], 100.0)
    _tell(study, "b128", knobs["b128"], 210.0)
    set_study_attrs(study, {"budget_plan": {"deadline": setup.deadline, "trials": 12,
                                            "trial_s": 2.0, "after_s": 9.0}})
    why = search_stop(setup, study, [3.0, 3.0])
    assert why and "the search stops after 2 trial(s)" in why, why
    assert "the plan made from the first window counted ~12 trials of ~2 s and ~9 s after " \
           "the search, where the trials took ~3 s" in why, why
    at_plan = search_stop(setup, study, [3.0] * 12)
    assert at_plan and "; the plan" not in at_plan, at_plan
    set_study_attrs(study, {"budget_plan": {"deadline": setup.deadline + 1.0, "trials": 12,
                                            "trial_s": 2.0, "after_s": 9.0}})
    other_run = search_stop(setup, study, [3.0, 3.0])
    assert other_run and "; the plan" not in other_run, other_run
