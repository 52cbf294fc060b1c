"""Never nothing when something faster is safe: the speed-only answer's trials, measured,
confirmed and checked after the numerics check refused the fast ones.

search/checks/speed_only.py says which configurations (each answer's fastest refused trial
with the user's arithmetic) and why. Here they run as trials of the study (unpruned, as the
same-training trial does: search/loop/same_training.py), the confirmation runs again over
the finalists the check left (the refused ones are no longer ranked: results/trials.py), and
the check runs on what it chose. Once per study: the record's ``speed_only`` says it ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.results.record import TrialAttrs, set_study_attrs, study_attrs, trial_attrs
from autotune.search.checks.numerics import check_numerics
from autotune.search.checks.speed_only import restored, targets
from autotune.search.confirmation.confirm import confirm
from autotune.search.loop.driver import Driver
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")


def fall_back(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None,
              on_trial: Callable[[optuna.Study, FrozenTrial], None] | None = None,
              confirming: StudySetup | None = None) -> dict[str, Any] | None:
    """Where the numerics check's refusals left an answer slower than a refused trial:
    measure the speed-only configurations, confirm again (``confirming``: the confirmation's
    setup, its budget cut to the time budget's room) where the study confirmed, and check
    what is chosen. Returns what it did (None: nothing to do, or done before)."""
    record = dict(study_attrs(study).get("numerics") or {})
    if "speed_only" in record:
        return None
    wanted = targets(study)
    if not wanted:
        return None
    made: dict[str, int] = {}
    for source, knobs in wanted:
        log.info("numerics: trial %d was refused; its speed knobs with your arithmetic (%s) "
                 "are measured as one more trial, the speed-only answer", source.number,
                 ", ".join(f"{k} {v}" for k, v in
                           restored(dict(trial_attrs(source)["knobs"]), knobs).items()))
        ran = _measure(setup, study, knobs, stop, on_trial)
        if ran is not None:
            made[str(ran.number)] = source.number
    done = {"from": made, "confirmed": False}
    set_study_attrs(study, {"numerics": {**record, "speed_only": done}})
    conf = study_attrs(study).get("confirmation") or {}
    if made and conf.get("finalists") and setup.study.confirm_runs:
        log.info("confirming again without the refused trials")
        again = confirm(confirming or setup, study, setup.study.confirm_runs,
                        setup.study.confirm_top, stop)
        done["confirmed"] = again is not None
        record = dict(study_attrs(study).get("numerics") or {})
        set_study_attrs(study, {"numerics": {**record, "speed_only": done}})
    check_numerics(setup, study, stop)
    return done


def _measure(setup: StudySetup, study: optuna.Study, knobs: dict[str, Any],
             stop: StopFlag | None,
             on_trial: Callable[[optuna.Study, FrozenTrial], None] | None) -> FrozenTrial | None:
    """One more trial of ``knobs``, unpruned (its figure is what the answer needs)."""
    study.enqueue_trial(setup.space.searched(knobs),
                        user_attrs=dict(TrialAttrs(source="speed_only")))
    driver = Driver(setup.with_study(prune=False, agent=False), study=study, on_trial=on_trial)
    waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    for _ in range(waiting):  # an older queued trial (a dead worker's, re-queued) runs first
        ran = driver.run_one(stop or StopFlag())
        if trial_attrs(ran).get("source") == "speed_only" and trial_attrs(ran).get("outcome"):
            return ran if trial_attrs(ran).get("outcome") == "ok" else None
    return None
