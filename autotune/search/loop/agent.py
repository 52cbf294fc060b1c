"""Diagnosis-guided search: turn the best trial's bottleneck into the next trial to run.
(While no trial fits the memory limit, the least-over trial's memory verdict stands in.)

Between trials the agent reads the best trial's diagnosis and enqueues the first of its fixes
that is valid here and not yet tried, ahead of the sampler. When the best has no untried fix
left, it goes on from the trials one window each cannot rank below the best (within
FINALIST_BAND of it, fastest first): a step that read a little lower may be the better one.
On the idle 2-core VM (2026-11-25) the batch-64 step read 0-4% below the batch-32 best in
three of five studies of the README's command; the agent stopped there, none of the three tried
batch 128, and batch 128 measured 6% faster than their export side by side (docs/benchmarks.md). It
steps aside every third trial so TPE keeps exploring, and when no such trial has an untried
fix. Each trial it proposes records where it came from and why (``source=agent``,
``agent_reason``).
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.console import detail
from autotune.core.knobs import fix_text
from autotune.core.space import Space
from autotune.diagnose.thresholds import FINALIST_BAND
from autotune.results.record import TrialAttrs, trial_attrs
from autotune.results.trials import best_trial, measured, over_limit, ranked_trials, study_unit

log = logging.getLogger("autotune")

# Every SAMPLER_EVERY-th trial is the sampler's, so the agent cannot starve exploration.
SAMPLER_EVERY = 3


def _within(space: Space, fix: dict[str, Any], current: Any) -> Any:
    """An integer fix beyond the domain (8 workers on 2 cores) becomes the domain's nearest
    value in the same direction, if that still changes the knob. A fix the measurement says
    may go past the domain (``beyond_domain``: a loader waiting on I/O) is capped at the end
    of what ``Space.beyond`` allows instead."""
    knob, value = fix["knob"], fix["value"]
    values = list(space.domains[knob].values)
    if fix.get("beyond_domain"):
        values += list(space.beyond(knob))
    if value in values or not isinstance(value, int) or isinstance(value, bool) \
            or not isinstance(current, int) or not all(isinstance(v, int) for v in values):
        return value
    ahead = [v for v in values if (current < v <= value) or (value <= v < current)]
    return min(ahead, key=lambda v: abs(v - value)) if ahead else value


def candidate(space: Space, base: dict[str, Any], fix: dict[str, Any]) -> dict[str, Any] | None:
    """``base`` with one fix applied, if the result is a valid point of the space."""
    knobs = dict(base)
    knobs[fix["knob"]] = fix["value"]
    knobs.update(fix.get("with") or {})
    if fix["knob"] == "num_workers" and int(fix["value"]) > 0 and knobs.get("prefetch_factor") is None:
        knobs["prefetch_factor"] = 2  # torch's default, once workers exist
    full = space.complete(space.searched(knobs))
    if any(full[k] != v for k, v in {fix["knob"]: fix["value"], **(fix.get("with") or {})}.items()):
        return None  # not valid on this device/workload, or another knob makes it inactive
    return full


def tried(study: optuna.Study, knobs: dict[str, Any], space: Space | None = None) -> bool:
    """Whether a trial already ran these knobs. With ``space``, a trial stored before a knob
    existed counts with the value it ran under (``Space.absent``)."""
    absent = space.absent if space is not None else {}
    return any({**{k: v for k, v in absent.items() if k not in stored}, **stored} == knobs
               for t in study.get_trials(deepcopy=False)
               if (stored := trial_attrs(t).get("knobs")) is not None)


def bases(study: optuna.Study) -> list[FrozenTrial]:
    """The trials the agent steers from, in order: the best, then every other trial whose
    search figure lies within FINALIST_BAND of the best's (one window each cannot rank them),
    fastest first."""
    best = best_trial(study)
    if best is None:
        return over_the_limit(study)
    floor = (1 - FINALIST_BAND) * (best.value or 0.0)
    return [best, *(t for t in ranked_trials(study)
                    if t.number != best.number and (t.value or 0.0) >= floor)]


def over_the_limit(study: optuna.Study) -> list[FrozenTrial]:
    """No trial fits the memory limit yet: the measured trials over it, the least over first.
    Their verdict is memory-bound, and its fixes (sharding under ranks, a smaller batch,
    activation checkpointing, bf16) lead back under the limit: without them the agent had no
    best to steer from, and a 2-rank study whose baseline did not fit left 8 trials to the
    sampler's draws (2026-11-28)."""
    over = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if measured(t) and over_limit(t)]
    return sorted(over, key=lambda t: float(trial_attrs(t).get("peak_memory_gb") or 0.0))


def _as_seen(t: FrozenTrial, best: FrozenTrial, unit: str = "samples/s") -> str:
    if over_limit(t):
        return (f"trial {t.number} (over the memory limit at "
                f"{float(trial_attrs(t).get('peak_memory_gb') or 0.0):.2f} GB, the least over "
                "of the trials measured; none fits yet)")
    if t.number == best.number:
        return f"trial {t.number} (best, {t.value:,.1f} {unit})"
    return (f"trial {t.number} ({t.value:,.1f} {unit}, within {FINALIST_BAND:.0%} of the "
            f"best trial {best.number}'s {best.value:,.1f}: one window each cannot rank them)")


def propose(study: optuna.Study, space: Space) -> tuple[dict[str, Any], str] | None:
    """The agent's next configuration and its reason, or None to let the sampler choose."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return None  # something is already queued (baseline, a re-run, an earlier proposal)
    recent = [trial_attrs(t).get("source") for t in trials[-(SAMPLER_EVERY - 1):]]
    if len(recent) == SAMPLER_EVERY - 1 and all(s == "agent" for s in recent):
        return None
    steer = bases(study)
    for base_trial in steer:
        if "diagnosis" not in trial_attrs(base_trial):
            continue
        diag = trial_attrs(base_trial)["diagnosis"]
        base = trial_attrs(base_trial)["knobs"]
        for asked in diag.get("fixes", []):
            value = _within(space, asked, base.get(asked["knob"]))
            fix = {**asked, "value": value}
            knobs = candidate(space, base, fix)
            if knobs is None or tried(study, knobs, space):
                continue
            capped = "" if value == asked["value"] else (
                f"; {asked['knob']}={asked['value']} capped at {value}, the largest valid here")
            why = (f"{_as_seen(base_trial, steer[0], study_unit(study))} is {diag['bottleneck']}: "
                   f"{fix_text(fix)} ({fix['why']}{capped})")
            return knobs, why
    return None


def enqueue(study: optuna.Study, space: Space) -> str | None:
    """Queue the agent's proposal, if it has one; return its reason."""
    proposal = propose(study, space)
    if proposal is None:
        return None
    knobs, why = proposal
    study.enqueue_trial(space.searched(knobs),
                        user_attrs=dict(TrialAttrs(source="agent", agent_reason=why)))
    detail("agent: %s", why)
    return why
