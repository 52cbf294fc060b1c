"""What the numerics check will cost (search/checks/numerics.py runs it): each answer to
export against your configuration at several seeds, each run a start-up and its steps. The
first window's estimate counts them at that window's steps; as the search ends, the
finalists' own windows, weighted by how often the confirmation's simulation has each lead
(search/console/estimate.py ``revised``)."""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.results.record import trial_attrs
from autotune.results.trials import changes_training
from autotune.search.checks.numerics import reference_knobs
from autotune.search.confirmation.forecast import Leaders
from autotune.search.confirmation.rounds import figure_window_s
from autotune.search.setup import StudySetup

#: Runs of a numerics check besides one per answer checked, per batch size: the user's
#: configuration at the finalist's seed, and at the next seeds (up to REFERENCE_SEEDS in all)
#: only where the finalist lies beyond spread.one_seed_bound of it. Counted at one: the bf16
#: finalists of the confirmation benchmark's README and GPT studies (2026-12-07) lay
#: 0.007-0.16% from your run at their seed against a bound of 6.45% at AMP's tolerance. A
#: chaotic recipe's, whose tail losses move more from seed to seed, may lie beyond it and then
#: runs REFERENCE_SEEDS, which the estimate does not foresee.
REFERENCE_RUNS = 1
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


def expected_check_s(setup: StudySetup, study: optuna.Study, finals: list[FrozenTrial],
                     same: list[FrozenTrial], base: FrozenTrial, led: Leaders = ()) -> float:
    """What the check is expected to cost: it vets each answer's leader as it leads
    (confirmation/vet.py), so its runs are those of every finalist that led after some round,
    and of the fastest trial that trains your model (the same-training answer's leader, where
    there is one), each reference once. ``led``: the confirmation's simulated leaders
    (forecast.Forecast.led), each set with its share of the simulated studies; without them
    (no confirmation), the search's fastest finalist leads. The dearest set, which this stated
    until 2026-12-06, said ~482 s on a GPT study whose check ran about 340 s."""
    own = [t for t in [*finals, *same] if not changes_training(study, t, base)]
    own_lead = max(own, key=lambda t: float(t.value or 0.0), default=None)
    trials = {t.number: t for t in [*finals, *same]}
    if not led and finals:
        led = ((frozenset({max(finals, key=lambda t: float(t.value or 0.0)).number}), 1.0),)
    total = 0.0
    for numbers, share in led:
        checked = {n: trials[n] for n in numbers if n in trials}
        if own_lead is not None:
            checked[own_lead.number] = own_lead
        total += share * check_cost_s(
            setup, [t for t in checked.values() if t.number != base.number], base)
    return total


def check_cost_s(setup: StudySetup, finals: list[FrozenTrial], base: FrozenTrial) -> float:
    """As check_numerics runs them: each answer's trial whose knobs differ from its reference
    once, each distinct reference at REFERENCE_RUNS seeds (a refused answer's next one, and a
    reference's further seeds, are not foreseen). A reference trains with the baseline's numerics at the finalist's batch size, so
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
    """The baseline's median step scaled to ``batch`` samples. Not a bound either way: the
    README's CPU study's batch-128 references took 8-10 s a run, start-up included, where 10
    steps at 4x the baseline's batch-32 step say 9.2 s alone (2026-11-28); a GPT study's fp32
    references ran 1.15-1.4x it (45-47 s at batch 16, 94-96 s at 32, 197-220 s at 64, where
    its batch-16 baseline's median step was 3.7-4.0 s; 2026-12-07)."""
    a = trial_attrs(base)
    step_s = float((a.get("step_ms") or {}).get("median") or 0.0) / 1e3
    base_batch = int((a.get("knobs") or {}).get("batch_size") or 0)
    return step_s * batch / base_batch if base_batch else 0.0
