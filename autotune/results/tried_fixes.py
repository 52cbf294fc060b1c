"""Which of a trial's diagnosis fixes the study measured, and what each gave.

A diagnosis is made from one trial's window, before the study tries its fixes; best.yaml and the
report show the best's and the baseline's diagnoses at the study's end. A fix the study has
since measured, and found slower, still read as advice: an mlp study's best (in-process loading)
said "try num_workers=1 + persistent_workers=True" after trial 1 had run exactly that and been
pruned, its one worker's loader ceiling 35,433 samples/s under the best's 63,173 (2026-11-27).
Each fix's text now carries what the study measured of it, where a trial ran it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.core.knobs import fix_text
from autotune.results.record import trial_attrs
from autotune.results.trials import feasible, over_limit


def _changes(fix: Mapping[str, Any]) -> dict[str, Any]:
    return {fix["knob"]: fix["value"], **(fix.get("with") or {})}


def _runs_fix(knobs: Mapping[str, Any], base: Mapping[str, Any], fix: Mapping[str, Any]) -> bool:
    """Whether ``knobs`` are ``base`` with ``fix`` applied: the fix's knobs at its values, every
    other knob as in ``base``, except prefetch_factor where the fix adds the first workers
    (None without workers, the DataLoader's default once there are some)."""
    want = {**base, **_changes(fix)}
    skip = {"prefetch_factor"} if fix["knob"] == "num_workers" and not base.get("num_workers") else set()
    keys = (set(want) | set(knobs)) - skip
    return all(knobs.get(k) == want.get(k) for k in keys)


def measured(trials: Sequence[FrozenTrial], t: FrozenTrial, fix: Mapping[str, Any]) -> str | None:
    """What the study measured of ``fix`` applied to ``t``: the first trial that ran it, in
    words (None: no trial did)."""
    seen = _measure(trials, t, fix)
    return seen[0] if seen else None


def _measure(trials: Sequence[FrozenTrial], t: FrozenTrial, fix: Mapping[str, Any]
             ) -> tuple[str, float] | None:
    """``measured``'s words and the ratio of the trial that ran the fix to ``t`` (0.0 where it
    gave none: pruned, failed, over the limit)."""
    base = trial_attrs(t).get("knobs") or {}
    for other in trials:
        attrs = trial_attrs(other)
        knobs = attrs.get("knobs")
        if other.number == t.number or knobs is None or not _runs_fix(knobs, base, fix):
            continue
        if feasible(other) and other.value and t.value:
            ratio = other.value / t.value
            return (f"measured in trial {other.number}: {ratio:.2f}x this trial, search "
                    "windows", ratio)
        if other.state == TrialState.COMPLETE and over_limit(other):
            return f"measured in trial {other.number}: over the memory limit", 0.0
        if other.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            why = str(attrs.get("reason") or other.state.name.lower())
            return f"measured in trial {other.number}: {why}", 0.0
    return None


def split_fixes(trials: Sequence[FrozenTrial], t: FrozenTrial,
                fixes: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """``t``'s fixes as (advice, tried): advice is what no trial ran or what ran faster than
    ``t``; tried is what a trial measured no faster (slower, pruned, failed, over the limit),
    with what it measured. A vision recipe's report suggested channels_last for its best
    where two trials had measured it at 0.74x and 0.93x: measured, it is no longer advice."""
    advice: list[str] = []
    tried: list[str] = []
    for fix in fixes:
        seen = _measure(trials, t, fix)
        words = fix_text(fix) + (f" ({seen[0]})" if seen else "")
        (advice if seen is None or seen[1] > 1.0 else tried).append(words)
    return advice, tried
