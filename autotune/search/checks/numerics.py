"""The numerics check: does a fast configuration still train like the user's own?

Before a configuration is exported, its first N optimizer steps are trained in a fresh trial
subprocess (the runner's machinery: CUDA never starts in the driver) and their losses are
compared with a reference run's, step by step. What a user checks by hand before trusting
bf16 or torch.compile on a long run.

The method. The reference is the baseline's knobs (the user's own numerics: their AMP,
compile, layout, transfer dtype...) at the finalist's batch size and gradient accumulation,
with the finalist's data path (``DATA_PATH_KNOBS``: DataLoader workers, prefetch, persistence,
pinning, the host allocator). Those change no arithmetic, but they change the batches a random
augmentation makes: each DataLoader worker seeds its own generator, so a reference with 0
workers and a finalist with 1 crop and flip differently (an ImageFolder pipeline with
RandomResizedCrop was refused at a 21% "deviation" that was only other crops). Both runs start
from the same seed (the same initial weights), the loader's shuffle is seeded, and with the
same workers each worker draws the same augmentations: both see exactly the same batches and
the same optimizer steps. Loss i of one run is then comparable with loss i of the other, and
any difference is the numerics of the knobs that changed (AMP, compile, CUDA Graphs, TF32,
channels_last, the fused optimizer), not the data nor the batch size's effect on training
dynamics (which ``study.keep_global_batch`` controls, and the README warns about). A loss is
the mean over the step's micro-batches.

The deviation is the largest relative difference ``|loss - ref| / |ref|`` over the N steps;
any non-finite loss fails outright. The tolerance is the largest of those of the knob families
the configuration changes from the reference (``study.numerics_tolerance``): bf16/fp16 round
every activation, so AMP is allowed most. The reference is run twice: where it differs from
itself (a nondeterministic kernel, threads summing in another order), the tolerance is at
least ``NOISE_MULTIPLE`` times that run-to-run deviation, since no configuration can be held
to a closer match than the user's own has with itself. A finalist beyond it is refused and the
next one is exported; a refusal blames the knob families only when both runs saw the same data
(a finalist that moves input stages to the device, ``device_transform``, draws its random
augmentations there, and the refusal says so). A check that could not run (the reference or
the finalist crashed here) is reported as unchecked and does not block the export.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.record import set_study_attrs, study_attrs, trial_attrs
from autotune.results.trials import ANSWERS, baseline_trial, chosen_trial
from autotune.search.confirmation.choose import (
    candidates_of,
    decide,
    decide_same,
    racing,
    selection_of,
    still_racing,
)
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")

#: Relative loss deviation allowed over the first N steps, per knob family. Measured on this
#: project's CPU (2026-11-23, 10 steps from seed 0, benchmarks/numerics_deviation.py):
#: ResNet-18 (32 px, batch 16) bf16 autocast 5.6%, channels_last 1.9%; GPT (2 layers) bf16
#: 0.03%; MLP bf16 0.005%; fused/foreach optimizers 0%. Small-batch BatchNorm training is
#: chaotic enough that summation order alone moves its loss by ~2% within 10 steps, so the
#: families allow 5% and AMP (8 or 11 mantissa bits per activation) 10%. A broken configuration
#: (a wrong scale, a NaN, a diverging run) is far beyond them.
DEFAULT_TOLERANCE: dict[str, float] = {
    "default": 0.05, "amp": 0.10, "compile": 0.05, "cuda_graphs": 0.05,
    "device_transform": 0.05, "tf32": 0.05, "attention": 0.05, "padding_free": 0.05,
    "comm_hook": 0.05, "sharding": 0.05, "fsdp_param_dtype": 0.10, "fsdp_reduce_dtype": 0.05,
}
#: Knobs that decide how batches reach the step, not the arithmetic on them: the reference
#: takes the finalist's values (see the module docstring). ``length_grouping`` changes which
#: samples share a batch, so a reference without it would compare other batches' losses: the
#: reference groups as the finalist does, both see the same samples, and what is compared is
#: the rest (packing, attention, AMP...). Grouping itself changes no arithmetic on a batch.
DATA_PATH_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory",
                   "non_blocking", "host_allocator", "length_grouping")
#: The tolerance is at least this many times the reference's deviation from itself.
NOISE_MULTIPLE = 2.0
_FAMILY_KNOBS = {"amp": ("amp",), "compile": ("compile",), "cuda_graphs": ("cuda_graphs",),
                 "device_transform": ("transfer_dtype", "transform_split"), "tf32": ("tf32",),
                 # SDPA backends sum in other orders; checkpointing recomputes the same ops.
                 "attention": ("attention", "activation_checkpointing"),
                 # The same samples in one row: the same tokens' losses, other kernels' shapes.
                 "padding_free": ("padding_free",),
                 # Gradients summed across ranks in fp16 or bf16 (DDP's compression hooks).
                 "comm_hook": ("comm_hook",),
                 # Sharded ranks (FSDP2) against replicated ones: the same arithmetic, the
                 # gradients averaged by a reduce-scatter instead of an all-reduce (another
                 # summation order); fp32 gradients of a 4-block GPT matched DDP's to the bit
                 # on 2 gloo ranks (tests/test_sharding.py).
                 "sharding": ("sharding", "fsdp_wrap_blocks", "fsdp_prefetch", "fsdp_cpu_offload"),
                 # Gathered parameters and compute in bf16: AMP's rounding (its tolerance).
                 "fsdp_param_dtype": ("fsdp_param_dtype",),
                 # Gradients reduce-scattered in bf16: comm_hook's rounding.
                 "fsdp_reduce_dtype": ("fsdp_reduce_dtype",)}


def check_tolerance(tolerance: dict[str, Any]) -> dict[str, float]:
    """The defaults overlaid with the user's; a ValueError names a bad key or value."""
    bad = [k for k in tolerance if k not in DEFAULT_TOLERANCE]
    if bad:
        raise ValueError(
            f"study.numerics_tolerance: unknown key(s) {', '.join(bad)}; valid keys: "
            f"{', '.join(DEFAULT_TOLERANCE)} (relative loss deviation allowed, e.g. "
            "study.numerics_tolerance.amp=0.1).")
    out = dict(DEFAULT_TOLERANCE)
    for k, v in tolerance.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"study.numerics_tolerance.{k}={v!r}: must be a positive number "
                             "(a relative loss deviation, e.g. 0.05 for 5%).")
        out[k] = float(v)
    return out


def families(knobs: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """The knob families this configuration changes from the reference ("default": none)."""
    out = [fam for fam, names in _FAMILY_KNOBS.items()
           if any(knobs.get(n) != reference.get(n) for n in names)]
    return out or ["default"]


def deviation(losses: list[float], reference: list[float]) -> float:
    """Largest relative loss difference over the steps both runs have."""
    devs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=False)]
    return max(devs) if devs else math.inf


def check_numerics(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None
                   ) -> dict[str, Any]:
    """Check what will be exported, where it decides: each answer's chosen trial (best.yaml's
    and the other answer's), the next only if that one is refused, until each answer's trial
    has passed; record the results in the study (``numerics``) and re-pick the confirmation's
    winner if it was refused. A finalist that is not exported is not run: the README's CPU
    study checked four finalists for its two answers, 3:28 of its 13:48 (2026-11-28). A
    reference (the user's numerics at a batch size, fed as the finalist is) runs once and is
    reused. Returns the record."""
    record: dict[str, Any] = dict(study_attrs(study).get("numerics") or {})
    record.setdefault("steps", setup.study.numerics_steps)
    results: dict[str, Any] = dict(record.get("trials") or {})
    references: dict[str, Reference] = {}
    tolerance = check_tolerance(setup.study.numerics_tolerance)

    def check(trial: FrozenTrial) -> None:
        if str(trial.number) in results:
            return
        results[str(trial.number)] = _check_one(setup, trial, tolerance, references, stop)
        record["trials"] = results
        set_study_attrs(study, {"numerics": record})
        _repick_confirmation(study, results)

    base_trial = baseline_trial(study)
    base = base_trial.number if base_trial is not None else None
    for answer in ANSWERS:  # each answer's trial (best.yaml's and the other) must be checked
        while True:
            chosen, _ = chosen_trial(study, answer)
            if chosen is None or str(chosen.number) in results or (
                    answer == "same" and chosen.number == base):  # the user's own: nothing to check
                break
            check(chosen)
    record["trials"] = results
    set_study_attrs(study, {"numerics": record})
    return record


def reference_knobs(setup: StudySetup, knobs: dict[str, Any]) -> dict[str, Any]:
    """The user's numerics at the finalist's batch size, fed the way the finalist is fed."""
    same_data = {k: knobs[k] for k in DATA_PATH_KNOBS if k in knobs}
    return {**setup.space.baseline, "batch_size": knobs["batch_size"], **same_data}


Reference = tuple[list[float] | None, float, str]  # losses, run-to-run deviation, error


def _reference(setup: StudySetup, knobs: dict[str, Any], references: dict[str, Reference],
               stop: StopFlag | None) -> Reference:
    """The reference's losses and its deviation from itself (run twice), cached per
    reference configuration."""
    key = json.dumps(knobs, sort_keys=True)
    if key not in references:
        tag = f"reference-{len(references)}"
        first, error = _losses(setup, knobs, f"{tag}-a", stop)
        again, error2 = _losses(setup, knobs, f"{tag}-b", stop) if first else (None, "")
        if first is None or again is None:
            references[key] = (None, 0.0, error or error2)
        else:
            finite = all(math.isfinite(v) for v in first + again)
            references[key] = (first, deviation(again, first) if finite else math.inf, "")
    return references[key]


def _check_one(setup: StudySetup, trial: FrozenTrial, tolerance: dict[str, float],
               references: dict[str, Reference], stop: StopFlag | None) -> dict[str, Any]:
    knobs = dict(trial_attrs(trial)["knobs"])
    ref_knobs = reference_knobs(setup, knobs)
    fams = families(knobs, ref_knobs)
    same_data = "device_transform" not in fams
    tol = max(tolerance[f] for f in fams)
    fed = {k: ref_knobs[k] for k in DATA_PATH_KNOBS if k in ref_knobs}
    entry: dict[str, Any] = {"families": fams, "tolerance": tol, "same_data": same_data,
                             "reference_data_path": fed}
    batch = int(knobs["batch_size"])
    if knobs == ref_knobs:  # the user's own numerics at this batch size: nothing to compare
        return {**entry, "max_rel_dev": 0.0, "finite": True, "passed": True}
    ref, noise, ref_error = _reference(setup, ref_knobs, references, stop)
    losses, error = (_losses(setup, knobs, f"trial-{trial.number}", stop) if ref is not None
                     else (None, ""))
    if losses is None or ref is None:
        why = f"not checked: {'the reference' if ref is None else 'its'} run failed ({ref_error or error})"
        log.warning("numerics of trial %d %s", trial.number, why)
        return {**entry, "max_rel_dev": None, "finite": None, "passed": None, "reason": why}
    if math.isfinite(noise) and noise > 0:
        tol = max(tol, NOISE_MULTIPLE * noise)
    finite = all(math.isfinite(v) for v in losses)
    dev = deviation(losses, ref) if finite else math.inf
    passed = finite and dev <= tol
    entry.update(max_rel_dev=round(dev, 6) if finite else None, finite=finite, passed=passed,
                 tolerance=round(tol, 6),
                 reference_noise=round(noise, 6) if math.isfinite(noise) else None,
                 losses=[round(v, 6) for v in losses], reference_losses=[round(v, 6) for v in ref])
    if not passed:
        feeding = ", ".join(f"{k}={v}" for k, v in fed.items())
        against = (f"against the reference (the baseline's numerics at batch_size={batch}, fed "
                   f"as this trial is: {feeding}; its own run-to-run deviation {noise:.2%})")
        blame = (f"tolerance {tol:.2%} for {', '.join(fams)}" if same_data else
                 f"tolerance {tol:.2%}; this trial moves input stages to the device "
                 "(transform_split/transfer_dtype), where random augmentations draw from "
                 "another generator, so its batches may differ from the reference's: the "
                 "deviation is not blamed on a knob family's arithmetic")
        entry["reason"] = (
            f"refused: {'a non-finite loss' if not finite else f'loss deviation {dev:.2%}'} "
            f"over the first {len(losses)} steps {against}; {blame}")
        log.warning("trial %d %s", trial.number, entry["reason"])
    else:
        log.info("numerics of trial %d: max loss deviation %.3g%% (tolerance %.3g%%)",
                 trial.number, 100 * dev, 100 * tol)
    return entry


def _losses(setup: StudySetup, knobs: dict[str, Any], tag: str, stop: StopFlag | None
            ) -> tuple[list[float] | None, str]:
    req = TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                       window=setup.window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                       env=setup.trial_env, grad_accum=setup.grad_accum(knobs),
                       numerics_steps=setup.study.numerics_steps, launch=setup.ranks)
    res = run_window(req, setup.out_dir / "numerics" / tag,
                     stop_requested=lambda: stop.reason if stop else None)
    if not res.ok or not res.losses:
        return None, f"{res.outcome}: {res.error}"
    return [float(v) for v in res.losses], ""


def _repick_confirmation(study: optuna.Study, results: dict[str, Any]) -> None:
    """If the confirmation's winner was refused, the choice is made again among the finalists
    left (their rounds and intervals stand: search/confirmation/choose.py decide); with none left, best.yaml
    falls back to the search figures."""
    conf = dict(study_attrs(study).get("confirmation") or {})
    same = conf.get("same_training") or {}

    def refused(key: Any) -> bool:
        return key is not None and (results.get(str(key)) or {}).get("passed") is False

    if "best_trial" not in conf or not (refused(conf["best_trial"]) or refused(same.get("best_trial"))):
        return
    out = {int(n) for n, e in results.items() if e.get("passed") is False}
    terms = selection_of(conf)  # the terms the confirmation decided with
    numbers = same.get("finalists") or []
    left = racing(candidates_of(conf, out), numbers, terms)
    if refused(conf["best_trial"]):
        conf = decide(conf, still_racing(left, terms), terms)
    set_study_attrs(study, {"confirmation": decide_same(conf, left, numbers, terms)})
