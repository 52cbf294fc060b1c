"""What the numerics check will cost (search/checks/numerics.py runs it): each answer to
export against your configuration at several seeds, each run a start-up and its steps. The
first window's estimate counts them at that window's steps; as the search ends, the
finalists' own windows (search/console/estimate.py ``revised``)."""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.results.record import trial_attrs
from autotune.results.trials import changes_training
from autotune.search.checks.numerics import reference_knobs
from autotune.search.checks.spread import REFERENCE_SEEDS
from autotune.search.confirmation.rounds import figure_window_s
from autotune.search.setup import StudySetup

#: Runs of a numerics check besides one per answer checked: the user's configuration at
#: several seeds (their spread is the tolerance: search/checks/spread.py), one per batch size.
REFERENCE_RUNS = REFERENCE_SEEDS
#: Answers the numerics check runs before the search says which: best.yaml's, and the one
#: that trains the same model where that differs (search/checks/numerics.py checks no other).
ANSWERS_CHECKED = 2


def numerics_run_s(first: dict[str, Any], window_s: float, steps: int) -> float:
    """One numerics run: the window's start-up (the window less its warm-up and measurement)
    and ``steps`` steps at the window's median step. The README's CPU study as 2 ranks spent
    43-44 s a run where the window less its extras, the estimate before, said 9 s
    (2026-11-27)."""
    if not steps:
        return 0.0
    start_s = max(0.0, window_s - float(first.get("warmup_s") or 0.0)
                  - float(first.get("measure_s") or 0.0))
    step_s = float((first.get("step_ms") or {}).get("median") or 0.0) / 1e3
    return start_s + steps * step_s


def check_sets(study: optuna.Study, finals: list[FrozenTrial], same: list[FrozenTrial],
               base: FrozenTrial) -> list[list[FrozenTrial]]:
    """The trials the numerics check may run, one list per trial the confirmation may pick:
    that trial, and the same-training answer's where it picks one that changes the training
    (the fastest of those that keep it, or any of them: the rounds decide). A trial that trains
    the same model as the baseline is both answers' and is checked once: a 4-layer GPT study
    whose both answers were its bf16 trial checked one trial in 55 s where counting a second
    answer said ~119 s (2026-12-01). The winner is not known when this runs: the README's
    study (2026-12-03) was estimated from its search's fastest finalist, a configuration of
    speed knobs that needs no check (~00:00), and the rounds picked a bf16 one (1:09)."""
    own = [t for t in [*finals, *same] if not changes_training(study, t, base)]
    sets: list[list[FrozenTrial]] = []
    for picked in finals:
        if picked in own or not own:
            sets.append([picked])
        else:
            sets.extend([picked, other] for other in own)
    return [[t for t in chosen if t.number != base.number] for chosen in sets]


def check_cost_s(setup: StudySetup, finals: list[FrozenTrial], base: FrozenTrial) -> float:
    """As check_numerics runs them: each answer's trial whose knobs differ from its reference
    once, each distinct reference at REFERENCE_RUNS seeds (a refused answer's next one is not
    foreseen). A reference trains with the baseline's numerics at the finalist's batch size, so
    its steps are the baseline's scaled by the batch (``_reference_step_s``), not the
    finalist's: the README's CPU study's bf16 finalists' runs took 5-7 s each and their fp32
    references' 8-10 s, 70 s in all, where counting every run at its finalist's steps said 44 s
    (2026-11-28)."""
    total, refs = 0.0, set()
    steps = setup.study.numerics_steps
    for t in finals:
        attrs: dict[str, Any] = dict(trial_attrs(t))
        knobs = dict(attrs.get("knobs") or {})
        ref = reference_knobs(setup, knobs)
        if knobs == ref:
            continue
        run_s = numerics_run_s(attrs, figure_window_s(t), steps)
        total += run_s
        key = json.dumps(ref, sort_keys=True)
        if key not in refs:
            own_step_s = float((attrs.get("step_ms") or {}).get("median") or 0.0) / 1e3
            ref_step_s = max(own_step_s, _reference_step_s(base, int(knobs["batch_size"])))
            total += REFERENCE_RUNS * (run_s + steps * (ref_step_s - own_step_s))
        refs.add(key)
    return total


def _reference_step_s(base: FrozenTrial, batch: int) -> float:
    """The baseline's median step scaled to ``batch`` samples: an upper figure, since a bigger
    batch uses the cores better (the README's CPU study's batch-128 references took 8-10 s a
    run, start-up included, where 10 steps at 4x the baseline's batch-32 step say 9.2 s
    alone)."""
    a = trial_attrs(base)
    step_s = float((a.get("step_ms") or {}).get("median") or 0.0) / 1e3
    base_batch = int((a.get("knobs") or {}).get("batch_size") or 0)
    return step_s * batch / base_batch if base_batch else 0.0
