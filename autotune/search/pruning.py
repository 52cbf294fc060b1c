"""Stopping trials that cannot win, and the ceilings that prove it.

Two kinds of evidence, cheapest first:
- measured ceilings (mock components: a trainer that discards batches, a loader that repeats
  one): the loader alone and the step alone. A trial
  cannot train faster than either, so one whose ceiling is below the best trial's throughput
  is pruned. Ceilings are cached in the study per setting that affects them, so a later trial
  with a known-too-slow loader is pruned before its subprocess even starts;
- the window's throughput so far, reported at each chunk edge (an Optuna pruner on
  intermediate values): far below the best.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.measure.runner import Watch
from autotune.results.record import trial_attrs
from autotune.results.trials import best_value, study_unit

# The knobs that decide what the input pipeline alone can deliver; every other knob (and the
# batch size) decides what the step alone can do.
LOADER_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory",
                "batch_size", "transfer_dtype", "transform_split", "cpu_threads",
                "pad_to_multiple_of")
COMPUTE_KNOBS = ("batch_size", "transfer_dtype", "transform_split", "amp", "compile", "cuda_graphs",
                 "channels_last", "set_to_none", "optimizer_impl", "tf32", "cudnn_benchmark",
                 "expandable_segments",
                 "non_blocking", "host_allocator", "cpu_threads", "pad_to_multiple_of")
# A ceiling is trusted to this relative error at least (its measured noise when larger):
# ceilings are measured in isolation over a short window; on a shared 2-core VM they vary by
# ~10% run to run. Below the best by more than this, it condemns a trial; beaten by more than
# this, it was mismeasured.
NOISE_FLOOR = 0.1
# A ceiling still being measured is judged after this many batches (timed after the first).
PARTIAL_MIN_BATCHES = 3
# "Far below the best": the share of the best under which the throughput so far, or a ceiling still
# being measured, stops the trial (noise on a shared machine is 10-25%, not 2x).
FAR_BELOW = 0.5


def ceiling_key(kind: str, knobs: Mapping[str, Any]) -> str:
    names = LOADER_KNOBS if kind == "loader" else COMPUTE_KNOBS
    blob = json.dumps({k: knobs.get(k) for k in names}, sort_keys=True)
    return f"ceiling.{kind}.{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def _noise_key(kind: str, knobs: Mapping[str, Any]) -> str:
    return "ceiling_noise" + ceiling_key(kind, knobs)[len("ceiling"):]


def cached_ceilings(study: optuna.Study, knobs: Mapping[str, Any]) -> dict[str, float]:
    """The study's ceilings for these knobs. A key set to None holds a ceiling that a trial
    beat (a measurement bug): it is measured again in every trial and never cached."""
    attrs = study.user_attrs  # the ceiling cache: keys from ceiling_key (record.py)
    out = {}
    for kind in ("loader", "compute"):
        value = attrs.get(ceiling_key(kind, knobs))
        if value is not None:
            out[kind] = float(value)
    return out


def cached_noise(study: optuna.Study, knobs: Mapping[str, Any]) -> dict[str, float]:
    attrs = study.user_attrs  # the ceiling cache: keys from ceiling_key (record.py)
    return {kind: float(attrs[_noise_key(kind, knobs)]) for kind in ("loader", "compute")
            if attrs.get(_noise_key(kind, knobs)) is not None}


def cache_ceilings(study: optuna.Study, knobs: Mapping[str, Any], ceilings: Mapping[str, float],
                   noise: Mapping[str, float] | None = None) -> None:
    attrs = study.user_attrs  # the ceiling cache: keys from ceiling_key (record.py)
    for kind, value in ceilings.items():
        key = ceiling_key(kind, knobs)
        if key in attrs and attrs[key] is None:
            continue  # distrusted: a trial beat this configuration's ceiling once
        study.set_user_attr(key, float(value))
        if noise and kind in noise:
            study.set_user_attr(_noise_key(kind, knobs), float(noise[kind]))


def distrust_ceilings(study: optuna.Study, knobs: Mapping[str, Any], kinds: Iterable[str]) -> None:
    """Never prune on these ceilings again (see cached_ceilings)."""
    for kind in kinds:
        study.set_user_attr(ceiling_key(kind, knobs), None)


def tolerance(noise: Mapping[str, float] | None, kind: str) -> float:
    """How far a ceiling may be off: its measured noise, at least NOISE_FLOOR."""
    return max(float((noise or {}).get(kind, 0.0)), NOISE_FLOOR)


def ceiling_violations(samples_per_sec: float, ceilings: Mapping[str, float],
                       noise: Mapping[str, float] | None = None,
                       unit: str = "samples/s") -> dict[str, str]:
    """The ceilings a completed trial beat by more than their noise: a ceiling is an upper
    bound, so one that a trial beats was mismeasured (a prefetched burst timed, a loaded
    moment) and would prune good configurations. ``samples_per_sec`` and the ceilings are in
    ``unit`` (a tokens/s study's are real tokens/s). The tolerance includes the window's own
    spread (``noise["window"]``, window.py): the two are measured at different moments, and
    on a loaded machine the trial's share of the cores changes between them. On a steady
    machine (noise within NOISE_FLOOR) a violation is a measurement bug; on an unsteady one
    the message says the speed may have changed instead."""
    out = {}
    window = float((noise or {}).get("window", 0.0))
    for kind, value in ceilings.items():
        tol = max(tolerance(noise, kind), window)
        if samples_per_sec > value * (1 + tol):
            why = ("measured on an unsteady (loaded) machine: its speed may have changed between"
                   " the two measurements, or the measurement is wrong" if tol > NOISE_FLOOR
                   else "a measurement bug")
            out[kind] = (f"trained at {samples_per_sec:,.1f} {unit}, above its own {kind} "
                         f"ceiling of {value:,.1f} (noise {tol:.0%}): {why}; this ceiling "
                         f"is not used to prune")
    return out


def ceiling_verdict(ceilings: Mapping[str, float], best: float | None,
                    noise: Mapping[str, float] | None = None,
                    unit: str = "samples/s") -> str | None:
    """Why these ceilings mean the trial cannot beat ``best`` (None: it still might): a ceiling
    that stays below the best even if it was low by its noise."""
    if best is None:
        return None
    for kind, value in sorted(ceilings.items(), key=lambda kv: kv[1]):
        if value * (1 + tolerance(noise, kind)) < best:
            what = "input pipeline alone" if kind == "loader" else "training step alone"
            return (f"{kind} ceiling {value:,.1f} {unit} (the {what}) is below the best "
                    f"trial's {best:,.1f} {unit}")
    return None


def partial_verdict(partial: Mapping[str, Any], best: float | None,
                    fraction: float = FAR_BELOW, min_batches: int = PARTIAL_MIN_BATCHES,
                    unit: str = "samples/s") -> str | None:
    """A ceiling still being measured that is already under ``fraction`` of the best (the
    chunk pruner's bar: far below, not merely below) after ``min_batches`` batches."""
    rate, n = partial.get("rate"), partial.get("batches") or 0
    if best is None or rate is None or n < min_batches or rate >= fraction * best:
        return None
    return (f"{partial.get('kind', 'loader')} ceiling so far {rate:,.1f} {unit} over {n} "
            f"batches (the input pipeline alone) is under {fraction:.0%} of the best trial's "
            f"{best:,.1f} {unit}")


class BestFractionPruner(optuna.pruners.BasePruner):
    """Prune when the window's throughput so far (the latest intermediate value) is below
    ``fraction`` of the best feasible trial.

    Unlike Optuna's median/percentile pruners this compares with the *best*: a configuration
    at 40% of the best throughput will not finish ahead of it, whatever the median does."""

    def __init__(self, fraction: float = FAR_BELOW, n_startup_trials: int = 1):
        if not 0 < fraction < 1:
            raise ValueError(f"fraction={fraction} must be in (0, 1)")
        self.fraction = fraction
        self.n_startup_trials = n_startup_trials

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(done) < self.n_startup_trials:
            return False
        best = best_value(study)
        return best is not None and trial.intermediate_values[step] < self.fraction * best


def window_pruner(study: optuna.Study, trial: optuna.Trial,
                  told: set[int]) -> Callable[[Watch], str | None]:
    """While a trial's window runs, at each progress reading: why to stop it (None: go on).
    A measured ceiling below the best, a ceiling still being measured far below it, or the
    window's throughput so far (reported at each chunk edge) far below it (the study's pruner
    on intermediate values). ``told``: the steps already told to Optuna for this trial; a
    window measured again (contended) reads its chunks from step 0 once more, and Optuna keeps
    a step's first value and warns on each repeat, so they are not told twice."""
    reported = [0]  # this window's chunks read so far
    seen_ceilings: dict[str, float] = {}
    held = [False]  # chunks reported while workers restarted, not yet pruned on

    def check(watch: Watch) -> str | None:
        if watch.contended:
            # Read while other processes held the cores: neither its ceilings nor its
            # chunks say what the configuration can do, so nothing is pruned or cached.
            return None
        best = best_value(study)
        if watch.ceilings and watch.ceilings != seen_ceilings:
            seen_ceilings.update(watch.ceilings)
            cache_ceilings(study, trial_attrs(trial)["knobs"], watch.ceilings,
                           watch.ceiling_noise)
            why = ceiling_verdict(watch.ceilings, best, watch.ceiling_noise, study_unit(study))
            if why:
                return why
        if watch.partial and not watch.ceilings:
            why = partial_verdict(watch.partial, best, unit=study_unit(study))
            if why:
                return why
        new = reported[0] < len(watch.chunks)
        while reported[0] < len(watch.chunks):
            if reported[0] not in told:
                trial.report(watch.chunks[reported[0]], reported[0])
                told.add(reported[0])
            reported[0] += 1
        # Workers restarted at an epoch start less than an epoch ago weigh in the chunks so
        # far more than in a run: they are reported, not pruned on (the latest, once the
        # window has run an epoch, carries the start at a run's weight).
        if watch.restarting:
            held[0] = held[0] or new
            return None
        if (new or held[0]) and trial.should_prune():
            # The pruner read the study itself: another worker may have finished the first
            # feasible trial since ``best`` was read above.
            best = best_value(study)
            return (f"{watch.chunks[reported[0] - 1]:,.1f} {study_unit(study)} over the first "
                    f"{reported[0]} chunk(s) of its window, under half the best trial's "
                    f"{best or 0:,.1f}")
        return None

    return check
