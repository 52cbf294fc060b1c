"""The speed-only answer: what a study exports when the numerics check refuses the fast ones.

Most of a study's speed often comes from knobs that keep the user's arithmetic (DataLoader
workers, the batch, channels_last) beside one that changes it (bf16 autocast, compile). Where
the check refuses every finalist that changes the arithmetic, exporting the user's own
configuration ("speedup: none") throws the safe part of the speedup away with the refused
part: a ResNet-18 study refused its seven bf16 finalists (2.22x) and exported nothing, where
the same study with ``knobs.amp=off`` exported 1.43x. So, for each answer, the fastest refused
trial's knobs with every knob of class numerics (core/knobs.py) set back to the user's are
measured, confirmed and checked in turn (``targets`` here; search/loop/speed_only.py runs
them), and the outcome is said: what was refused, what it would have given, and what was
exported instead (``outcome_words``).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.core.knobs import BY_NAME, KNOBS
from autotune.results.record import trial_attrs
from autotune.results.trials import (
    ANSWERS,
    baseline_trial,
    changes_training,
    chosen_trial,
    measured,
    refused,
)


def speed_only_knobs(knobs: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """``knobs`` with every knob of class numerics set back to ``reference``'s; a knob made
    inactive by the values restored takes its ``off`` value."""
    out: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.name not in knobs:
            continue
        value = reference.get(knob.name) if knob.effect == "numerics" else knobs[knob.name]
        out[knob.name] = knob.off if knob.inactive(out) is not None else value
    return out


def restored(knobs: dict[str, Any], speed_only: dict[str, Any]) -> dict[str, str]:
    """The numerics knobs the speed-only configuration sets back: {"amp": "bf16 -> off"}."""
    return {k: f"{v} -> {speed_only.get(k)}" for k, v in knobs.items()
            if k in BY_NAME and BY_NAME[k].effect == "numerics" and speed_only.get(k) != v}


def targets(study: optuna.Study) -> list[tuple[FrozenTrial, dict[str, Any]]]:
    """For each answer whose chosen trial is now slower (search figures) than a refused one:
    the fastest refused trial of that answer and its speed-only knobs, where those differ
    from the user's own and from every configuration a trial already measured."""
    base = baseline_trial(study)
    out: list[tuple[FrozenTrial, dict[str, Any]]] = []
    if base is None:
        return out
    base_knobs = dict(trial_attrs(base)["knobs"])
    out_numbers = refused(study)
    done = [dict(trial_attrs(t).get("knobs") or {}) for t in study.get_trials(deepcopy=False)
            if measured(t)]
    for answer in ANSWERS:
        chosen, _ = chosen_trial(study, answer)
        pool = [t for t in study.get_trials(deepcopy=False) if t.number in out_numbers
                and (answer == "any" or not changes_training(study, t, base))]
        if not pool:
            continue
        fastest = max(pool, key=lambda t: t.value or 0.0)
        if chosen is not None and (chosen.value or 0.0) >= (fastest.value or 0.0):
            continue
        knobs = speed_only_knobs(dict(trial_attrs(fastest)["knobs"]), base_knobs)
        if knobs != base_knobs and knobs not in done and all(knobs != k for _, k in out):
            out.append((fastest, knobs))
    return out


def outcome_words(study: optuna.Study, record: dict[str, Any]) -> str | None:
    """What the check refused, what the refused trials would have given and why, and what
    was exported instead (None: nothing refused)."""
    results = record.get("trials") or {}
    out = sorted(int(n) for n, e in results.items() if e.get("passed") is False)
    if not out:
        return None
    gave = "; ".join(f"trial {n}" + (f", which would have given {results[str(n)]['would_give']}"
                                      if results[str(n)].get("would_give") else "")
                     for n in out)
    words = ("refused by the numerics check, their loss beyond your own seed-to-seed spread "
             f"(figures below): {gave}")
    chosen, conf = chosen_trial(study, "any")
    base = baseline_trial(study)
    fallback = {int(n): int(src) for n, src in
                ((record.get("speed_only") or {}).get("from") or {}).items()}
    if chosen is None or base is None:
        return words
    if chosen.number == base.number:
        tried = [n for n in fallback if str(n) in results or _measured(study, n)]
        return (words + "; no configuration that keeps your arithmetic was shown faster than "
                "yours, so your own configuration is kept"
                + (f" (the speed-only configuration, trial(s) {', '.join(map(str, tried))}, "
                   "measured too)" if tried else ""))
    figure = conf.get("speedup_text") or "on its search window"
    if chosen.number in fallback:
        src = study.get_trials(deepcopy=False)[fallback[chosen.number]]
        back = restored(dict(trial_attrs(src)["knobs"]), dict(trial_attrs(chosen)["knobs"]))
        return (words + f"; exported instead the speed-only answer, trial {chosen.number}: "
                f"trial {src.number}'s speed knobs with your arithmetic ("
                + ", ".join(f"{k} {v}" for k, v in back.items()) + f"), {figure}")
    return words + f"; exported instead trial {chosen.number}, the fastest that passed: {figure}"


def _measured(study: optuna.Study, number: int) -> bool:
    trials = study.get_trials(deepcopy=False)
    return number < len(trials) and measured(trials[number])
