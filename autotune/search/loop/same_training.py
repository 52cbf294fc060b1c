"""The same-training answer's own trial: the search's best, at the user's own global batch.

A study's fastest configuration often owes most of its speed to a knob that changes what is
trained (a 4x batch: 4x fewer optimizer steps per epoch at the same learning rate; the knob
registry classes each knob, core/knobs.py). The user who cannot change their training wants
the fastest configuration that trains the same model, measured, not only whichever trial of
the search happened to keep their batch. So as the search ends, the best trial's knobs with
every training knob set back to the user's (``same_training_knobs``: its workers, layout,
AMP, compile... at the baseline's batch size; in a study that accumulates, at the user's
global batch: the best's micro-batch where it divides it, else the largest of the domain
below it that does, with the accumulation that makes up the rest, and without CUDA Graphs
where it accumulates) run as one more trial,
unpruned, unless a trial already measured them; the confirmation then races it and the fastest same-training trial of
the search beside the finalists (results/trials.py same_training_finalists), one window each
per round while they are in question.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.console import detail
from autotune.core.effects import same_training_knobs
from autotune.results.record import TrialAttrs, trial_attrs
from autotune.results.trials import baseline_trial, best_trial, changes_training
from autotune.search.loop.driver import Driver
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")


def target(setup: StudySetup, study: optuna.Study) -> dict | None:
    """The knobs to measure: the search's best with its training knobs set back to the
    baseline's (None: no best yet, or the best already trains the same model)."""
    best, base = best_trial(study), baseline_trial(study)
    if best is None or base is None or not changes_training(study, best, base):
        return None
    knobs = same_training_knobs(trial_attrs(best)["knobs"], trial_attrs(base)["knobs"],
                                setup.global_batch, setup.space.domains["batch_size"].values)
    if knobs.get("cuda_graphs") and setup.grad_accum(knobs) > 1:
        # The best captured a whole step at a micro-batch of its own; this one accumulates, and
        # a captured step is a whole optimizer step (core/domains.GraphsAccumulate).
        knobs["cuda_graphs"] = False
    return knobs


def measure_same_training(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None,
                          on_trial: Callable[[optuna.Study, FrozenTrial], None] | None = None
                          ) -> FrozenTrial | None:
    """Run the best's same-training configuration as one more trial, where no trial measured
    it yet; returns the trial that holds it (None when there is nothing to measure). Unpruned:
    it is slower than the best by design, and its figure is what the answer needs."""
    knobs = target(setup, study)
    if knobs is None:
        return None
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    for t in study.get_trials(deepcopy=False, states=done):
        if trial_attrs(t).get("knobs") == knobs and trial_attrs(t).get("outcome"):
            return t
    changed = changes_training(study, best_trial(study))  # type: ignore[arg-type]
    detail("same training: the best's speed and numerics knobs with %s set back to yours, "
             "measured as one more trial", ", ".join(changed))
    study.enqueue_trial(setup.space.searched(knobs),
                        user_attrs=dict(TrialAttrs(source="same_training")))
    driver = Driver(setup.with_study(prune=False, agent=False), study=study,
                    on_trial=on_trial)
    waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
    for _ in range(waiting):  # an older queued trial (a dead worker's, re-queued) runs first
        ran = driver.run_one(stop or StopFlag())
        if trial_attrs(ran).get("source") == "same_training":
            return ran
    return None
