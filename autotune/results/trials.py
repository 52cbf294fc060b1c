"""Which trials count: the one definition of measured, feasible, refused, ranked, finalists,
best, chosen and baseline, read from the stored study alone.

Every part of autotune that picks trials (the pruner's best so far, the agent's best, the
confirmation's finalists, the numerics check, best.yaml, the report, the progress line) asks
here, so a trial refused by the numerics check, over the memory limit or measured unclean is
treated the same way everywhere.
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.effects import training_changes
from autotune.core.tokens import TOKENS, unit_of
from autotune.diagnose.thresholds import FINALIST_BAND
from autotune.results.record import TrialAttrs, study_attrs, trial_attrs


def measured(t: FrozenTrial) -> bool:
    """COMPLETE with a clean window (outcome ``ok``): its figures are real. An OOM trial is
    COMPLETE too (infeasible, so the sampler learns the memory boundary) but not measured."""
    return t.state == TrialState.COMPLETE and trial_attrs(t).get("outcome") == "ok"


def study_unit(study: optuna.Study) -> str:
    """The unit of the study's values: "tokens/s" where its workload counts tokens, else
    "samples/s" (also a study stored before units were recorded)."""
    return unit_of(study_attrs(study).get("unit"))


def rate(attrs: TrialAttrs) -> float:
    """A trial's search-window throughput in its own unit (real tokens/s or samples/s)."""
    if unit_of(attrs.get("unit")) == TOKENS:
        return float(attrs.get("tokens_per_sec") or 0.0)
    return float(attrs.get("samples_per_sec") or 0.0)


def over_limit(t: FrozenTrial) -> bool:
    """A constraint violated: peak memory over the limit, or an out-of-memory end."""
    return any(v > 0 for v in t.constraints.values())


def feasible(t: FrozenTrial) -> bool:
    """Measured, within the memory limit, with a value: a candidate for best."""
    return measured(t) and not over_limit(t) and t.value is not None


def refused(study: optuna.Study) -> set[int]:
    """Trials the numerics check refused: never best, never exported."""
    trials = (study_attrs(study).get("numerics") or {}).get("trials") or {}
    return {int(n) for n, e in trials.items() if e.get("passed") is False}


def ranked_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible trials the numerics check did not refuse, fastest first (search figures)."""
    out = refused(study)
    ok = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
          if feasible(t) and t.number not in out]
    return sorted(ok, key=lambda t: t.value or 0.0, reverse=True)


def window_noise(t: FrozenTrial) -> float:
    """A trial's own noise: the relative spread of its window's two halves (measure/figures.py
    window_spread), 0 where unknown."""
    return float((trial_attrs(t).get("ceiling_noise") or {}).get("window") or 0.0)


def beats(t: FrozenTrial, incumbent: FrozenTrial) -> bool:
    """Whether ``t`` is faster than ``incumbent`` by more than either window's own noise: a
    lead inside the noise is the machine's, not the configuration's."""
    noise = max(window_noise(t), window_noise(incumbent))
    return (t.value or 0.0) > (incumbent.value or 0.0) * (1 + noise)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best trial by its search figure (what the agent and the pruner compare with), read
    noise-aware: trials in the order they ran, a later one takes over only when it ``beats``
    the incumbent; one within the noise of the best is not declared better."""
    best = None
    for t in sorted(ranked_trials(study), key=lambda t: t.number):
        if best is None or beats(t, best):
            best = t
    return best


def near_best(study: optuna.Study) -> list[FrozenTrial]:
    """Faster-looking trials that do not beat the best: within its noise (said in progress)."""
    best = best_trial(study)
    if best is None:
        return []
    return [t for t in ranked_trials(study)
            if t.number != best.number and (t.value or 0.0) > (best.value or 0.0)]


def best_value(study: optuna.Study) -> float | None:
    """The best trial's value so far, in the study's unit (None before any)."""
    best = best_trial(study)
    return None if best is None else best.value


def finalists(study: optuna.Study, top: int) -> list[FrozenTrial]:
    """The ``top`` fastest ranked trials, one per distinct configuration, and after them any
    other whose search figure lies within FINALIST_BAND of the fastest (at most ``2 * top``
    in all): one window each cannot rank configurations that close, so the confirmation's
    rounds do (racing drops the ones that fall behind after three)."""
    seen: set[str] = set()
    out: list[FrozenTrial] = []
    for t in ranked_trials(study):
        key = json.dumps(trial_attrs(t).get("knobs"), sort_keys=True)
        if key in seen:
            continue
        close = bool(out) and (t.value or 0.0) >= (1 - FINALIST_BAND) * (out[0].value or 0.0)
        if len(out) >= top and not (close and len(out) < 2 * top):
            break
        seen.add(key)
        out.append(t)
    return out


#: study.training: "any" (best.yaml holds the fastest configuration, whatever it changes in
#: training) or "same" (the fastest that trains the same model); the other answer is written
#: beside it, in the file named here, where it is another configuration.
ANSWERS = ("any", "same")
ANSWER_FILES = {"any": "best-any-training.yaml", "same": "best-same-training.yaml"}


def training_setting(study: optuna.Study) -> str:
    """Which answer the study's best.yaml holds (a study stored before the setting: any)."""
    return str(study_attrs(study).get("training") or "any")


def changes_training(study: optuna.Study, t: FrozenTrial,
                     base: FrozenTrial | None = None) -> dict[str, str]:
    """What ``t``'s knobs change in training against the baseline's (core/effects.py
    training_changes; in a study that accumulates, batch_size is a micro-batch and the global
    batch is what counts): {} when it trains the same model."""
    base = base if base is not None else baseline_trial(study)
    if base is None:
        return {}
    global_batch, ranks = batch_context(study)
    return training_changes(trial_attrs(t).get("knobs") or {}, trial_attrs(base).get("knobs") or {},
                            global_batch, ranks)


def batch_context(study: optuna.Study) -> tuple[int | None, int]:
    """The study's global batch per rank where it accumulates (None: it does not) and the
    ranks each trial ran as: what makes a trial's batch_size a global batch."""
    attrs = study_attrs(study)
    ranks = int((attrs.get("device") or {}).get("ranks") or 1)
    return (int(attrs["global_batch"]) if attrs.get("global_batch") else None), ranks


def study_optimizer(study: optuna.Study) -> str | None:
    """The optimizer's class name as the trials built it (the baseline's first, else any
    trial's; None in a study stored before trials recorded it): the learning-rate rule the
    answers state follows its family (core/effects.py)."""
    base = baseline_trial(study)
    if base is not None and trial_attrs(base).get("optimizer"):
        return trial_attrs(base).get("optimizer")
    for t in study.get_trials(deepcopy=False):
        if trial_attrs(t).get("optimizer"):
            return trial_attrs(t).get("optimizer")
    return None


def same_training_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The ranked trials that train the same model as the baseline, fastest first."""
    base = baseline_trial(study)
    return [t for t in ranked_trials(study) if base is not None
            and not changes_training(study, t, base)]


def same_training_finalists(study: optuna.Study, finals: list[FrozenTrial]) -> list[FrozenTrial]:
    """The confirmation's same-training candidates beside ``finals``: the fastest trial of the
    search that trains the same model, and the latest trial that measured the search's best's
    speed and numerics knobs at the user's own batch (source ``same_training``,
    search/loop/same_training.py). The baseline and configurations already among the finalists are
    measured in every round anyway; [] where there is no other."""
    base = baseline_trial(study)
    if base is None:
        return []
    seen = {_key(t) for t in [*finals, base]}
    same = [t for t in same_training_trials(study) if _key(t) not in seen]
    measured_for_best = sorted((t for t in same if trial_attrs(t).get("source") == "same_training"),
                               key=lambda t: t.number)[-1:]
    out: list[FrozenTrial] = []
    for t in [*same[:1], *measured_for_best]:
        if t.number not in {o.number for o in out}:
            out.append(t)
    return out


def _key(t: FrozenTrial) -> str:
    return json.dumps(trial_attrs(t).get("knobs"), sort_keys=True)


def best_same_training(study: optuna.Study) -> FrozenTrial | None:
    """The fastest same-training trial by its search figure, read noise-aware as best_trial."""
    best = None
    for t in sorted(same_training_trials(study), key=lambda t: t.number):
        if best is None or beats(t, best):
            best = t
    return best


def chosen_trial(study: optuna.Study, answer: str | None = None
                 ) -> tuple[FrozenTrial | None, dict[str, Any]]:
    """The trial best.yaml exports, and the confirmation that chose it ({} if none applies).
    ``answer``: "any" or "same" (ANSWERS; default: the study's own setting, training_setting).

    The confirmation's winner, while the search's fastest trial is among the finalists it
    re-ran; a study resumed after it may have found a faster one, which then stands alone on
    its search figure until it is confirmed in turn. The same-training answer is the
    confirmation's ``same_training`` choice, given as the confirmation's own keys (its
    interval and figures), while the search's fastest same-training trial was a finalist."""
    answer = answer or training_setting(study)
    conf = study_attrs(study).get("confirmation") or {}
    if answer == "same":
        best = best_same_training(study)
        same = conf.get("same_training") or {}
        ranked = same_training_trials(study)
        finals = {*(conf.get("finalists") or []), *(same.get("finalists") or []),
                  conf.get("baseline_trial")}
        if best is None or ranked[0].number not in finals or "best_trial" not in same:
            return best, {}
        conf = {**conf, **same}
    else:
        best = best_trial(study)
        ranked = ranked_trials(study)
        finals = set(conf.get("finalists") or [])
        if best is None or ranked[0].number not in finals or "best_samples_per_sec" not in conf:
            return best, {}
    chosen = next((t for t in ranked_trials(study) if t.number == conf["best_trial"]), None)
    return (chosen, conf) if chosen is not None else (best, {})


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """Trial 0's configuration (the workload's own settings), once it completed."""
    for t in study.get_trials(deepcopy=False):
        if trial_attrs(t).get("source") == "baseline" and t.state == TrialState.COMPLETE:
            return t
    return None


def counts(study: optuna.Study) -> dict[str, int]:
    trials = study.get_trials(deepcopy=False)
    by = {s: sum(1 for t in trials if t.state == s) for s in TrialState}
    return {
        "trials": len(trials),
        "complete": by[TrialState.COMPLETE],
        "pruned": by[TrialState.PRUNED],
        "failed": by[TrialState.FAIL],
        "running": by[TrialState.RUNNING],
        "infeasible": sum(1 for t in trials if t.state == TrialState.COMPLETE and over_limit(t)),
    }
