"""The numerics check: does a fast configuration still train like the user's own?

Before a configuration is exported, its first N optimizer steps are trained in a fresh trial
subprocess (the runner's machinery: CUDA never starts in the driver), and so is the user's
own configuration at several seeds: a finalist is refused only when its loss over the last
steps leaves the spread of the user's own runs (search/checks/spread.py says why and how).
What a user checks by hand before trusting bf16 or torch.compile on a long run: "does it
stay within what another seed of my run would do".

The references. The user's numerics (the baseline's AMP, compile, layout, transfer dtype...)
at the finalist's batch size and gradient accumulation, with the finalist's data path where
it decides which random draws a batch gets (``DATA_PATH_KNOBS``: DataLoader workers and their
persistence, length grouping): those change no arithmetic, but each DataLoader worker seeds
its own generator, so a reference fed otherwise would crop and flip otherwise. Prefetching,
pinning and the host allocator change neither the samples nor the draws: finalists that
differ only there share a reference. It runs at the study's seed, and so does the
finalist, whose losses, in a recipe that is not chaotic, follow it step by step (the
step-by-step deviation is kept as information); then at the next seeds, up to
``REFERENCE_SEEDS`` (another initialization and data order), only where the verdict needs
their spread: a finalist within ``spread.one_seed_bound`` of the run at its seed passes
whatever the others read (search/checks/references.py). A reference run per seed and batch
size is made once and reused.

The verdict. The finalist's tail loss (its mean over the last half of the steps) against the
references' mean: refused beyond ``tolerance``, NOISE_MULTIPLE times the references' own
spread and at least the loosest tolerance of the knob families the finalist changes
(``study.numerics_tolerance``: bf16/fp16 round every activation, so AMP is allowed most). A
finalist beyond it runs again at the next seed and is refused only when that run is beyond it
too: three references can agree by chance. A non-finite finalist loss is refused outright; a
reference that diverges (a non-finite loss of the user's own configuration) makes the check
uninformative: the finalist is reported unchecked, not refused. A refusal blames the knob
families only when both sides saw the same data (a finalist that moves input stages to the
device, ``device_transform``, draws its random augmentations there). A check that could not
run (a crash here) is reported as unchecked and does not block the export.

A refused finalist is not exported and the next one is; where that leaves an answer slower
than a refused one, its speed-only configuration is measured and confirmed
(search/checks/speed_only.py says which, search/loop/speed_only.py runs it), so that a faster answer that keeps the user's arithmetic is
never thrown away with the refused ones.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.core.console import detail
from autotune.results.record import set_study_attrs, study_attrs, trial_attrs
from autotune.results.trials import ANSWERS, baseline_trial, chosen_trial
from autotune.search.checks.references import Reference, reference, run_losses
from autotune.search.checks.speed_only import outcome_words
from autotune.search.checks.spread import (
    NOISE_MULTIPLE,
    REFERENCE_SEEDS,
    Spread,
    finite,
    one_seed_bound,
    passes_on_one_seed,
    step_deviation,
    tail_loss,
    tail_steps,
)
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

#: The least relative deviation of the tail loss allowed, per knob family (the references'
#: spread widens it: search/checks/spread.py). Measured on this project's CPU (2026-11-23, 10
#: steps from seed 0, step by step, benchmarks/numerics_deviation.py): ResNet-18 (32 px, batch
#: 16) bf16 autocast 5.6%, channels_last 1.9%; GPT (2 layers) bf16 0.03%; MLP bf16 0.005%;
#: fused/foreach optimizers 0%. Small-batch BatchNorm training moves its loss by ~2% within 10
#: steps from summation order alone, so the families allow 5% and AMP (8 or 11 mantissa bits
#: per activation) 10%. A broken configuration (a wrong scale, a NaN, a diverging run) is far
#: beyond them.
DEFAULT_TOLERANCE: dict[str, float] = {
    "default": 0.05, "amp": 0.10, "compile": 0.05, "cuda_graphs": 0.05,
    "device_transform": 0.05, "tf32": 0.05, "attention": 0.05, "padding_free": 0.05,
    "comm_hook": 0.05, "sharding": 0.05, "fsdp_param_dtype": 0.10, "fsdp_reduce_dtype": 0.05,
}
#: Knobs that decide which samples and random draws a batch gets, not the arithmetic on them:
#: the reference takes the finalist's values (see the module docstring). The workers each seed
#: a generator of their own, and persistent ones keep drawing from it at the next epoch where
#: others are seeded again. ``length_grouping`` changes which samples share a batch, so a
#: reference without it would compare other batches' losses: the reference groups as the
#: finalist does, both see the same samples, and what is compared is the rest (packing,
#: attention, AMP...). Prefetching, pinning, non-blocking copies and the host allocator are
#: not here: the same batches arrive, and finalists that differed only in them each ran a
#: reference of their own at 3 seeds.
DATA_PATH_KNOBS = ("num_workers", "persistent_workers", "length_grouping")
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
    """Largest relative loss difference step by step (spread.step_deviation)."""
    return step_deviation(losses, reference)


def check_numerics(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None
                   ) -> dict[str, Any]:
    """Check what will be exported, where it decides: each answer's chosen trial (best.yaml's
    and the other answer's), the next only if that one is refused, until each answer's trial
    has passed; record the results in the study (``numerics``) and re-pick the confirmation's
    winner if it was refused. A finalist that is not exported is not run: the README's CPU
    study checked four finalists for its two answers, 3:28 of its 13:48 (2026-11-28). Where
    refusals left an answer slower than a refused trial, search/loop/speed_only.py measures
    and confirms the speed-only configurations and calls this again. Returns the record, its
    outcome in words (``words``) included."""
    check = _Check(setup, study, stop)
    check.answers()
    check.record["words"] = outcome_words(study, check.record)
    check.save()
    return check.record


def vetting(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None
            ) -> Callable[[int], bool]:
    """The check of one trial by number, for the confirmation to run on each answer's leader
    as soon as it leads (search/confirmation/vet.py): False where refused. Its verdicts are
    saved in the study's record, where check_numerics finds them after the rounds."""
    check = _Check(setup, study, stop)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}

    def vet(number: int) -> bool:
        check.trial(by_number[number])
        return check.results[str(number)].get("passed") is not False

    return vet


class _Check:
    """One study's check: its record, the tolerances, the references run so far."""

    def __init__(self, setup: StudySetup, study: optuna.Study, stop: StopFlag | None) -> None:
        self.setup, self.study, self.stop = setup, study, stop
        self.record: dict[str, Any] = dict(study_attrs(study).get("numerics") or {})
        self.record.setdefault("steps", setup.study.numerics_steps)
        self.record["tail_steps"] = tail_steps(setup.study.numerics_steps)
        self.record["reference_seeds"] = REFERENCE_SEEDS
        self.record["noise_multiple"] = NOISE_MULTIPLE
        self.results: dict[str, Any] = dict(self.record.get("trials") or {})
        self.tolerance = check_tolerance(setup.study.numerics_tolerance)
        # Kept in the record: a second call (after the speed-only answer's trials) reuses them.
        self.references = {k: Reference.from_dict(v)
                           for k, v in (self.record.get("references") or {}).items()}

    def save(self) -> None:
        self.record["trials"] = self.results
        self.record["references"] = {k: r.as_dict() for k, r in self.references.items()
                                     if not r.error}  # a run that failed is tried again
        set_study_attrs(self.study, {"numerics": self.record})

    def refused(self) -> list[int]:
        return [int(n) for n, e in self.results.items() if e.get("passed") is False]

    def trial(self, trial: FrozenTrial) -> None:
        if str(trial.number) in self.results:
            return
        entry = _check_one(self.setup, trial, self.tolerance, self.references, self.stop)
        if entry.get("passed") is False:
            entry["would_give"] = would_give(self.study, trial)
        self.results[str(trial.number)] = entry
        self.save()
        _repick_confirmation(self.study, self.results)

    def answers(self) -> None:
        """Each answer's chosen trial, until each one's has passed (or is the user's own:
        nothing to check)."""
        base_trial = baseline_trial(self.study)
        base = base_trial.number if base_trial is not None else None
        for answer in ANSWERS:
            while True:
                chosen, _ = chosen_trial(self.study, answer)
                if chosen is None or str(chosen.number) in self.results or chosen.number == base:
                    break
                self.trial(chosen)
        self.save()


def would_give(study: optuna.Study, trial: FrozenTrial) -> str:
    """What a refused trial measured: its confirmed interval where the rounds measured it,
    else its search window against the baseline's."""
    conf = study_attrs(study).get("confirmation") or {}
    iv = (conf.get("intervals") or {}).get(str(trial.number))
    if iv and iv.get("ci_low") is not None:
        return (f"{iv['speedup']:.2f}x (95% CI {iv['ci_low']:.2f}-{iv['ci_high']:.2f}x, "
                f"{iv['rounds']} rounds)")
    base = baseline_trial(study)
    if base is not None and base.value and trial.value:
        return f"{trial.value / base.value:.2f}x (one search window each)"
    return "not measured against yours"


def reference_knobs(setup: StudySetup, knobs: dict[str, Any]) -> dict[str, Any]:
    """The user's numerics at the finalist's batch size, fed the way the finalist is fed."""
    same_data = {k: knobs[k] for k in DATA_PATH_KNOBS if k in knobs}
    return {**setup.space.baseline, "batch_size": knobs["batch_size"], **same_data}


def _check_one(setup: StudySetup, trial: FrozenTrial, tolerance: dict[str, float],
               references: dict[str, Reference], stop: StopFlag | None) -> dict[str, Any]:
    knobs = dict(trial_attrs(trial)["knobs"])
    ref_knobs = reference_knobs(setup, knobs)
    fams = families(knobs, ref_knobs)
    floor = max(tolerance[f] for f in fams)
    fed = {k: ref_knobs[k] for k in DATA_PATH_KNOBS if k in ref_knobs}
    entry: dict[str, Any] = {"families": fams, "tolerance": floor, "family_tolerance": floor,
                             "same_data": "device_transform" not in fams,
                             "reference_data_path": fed}
    if knobs == ref_knobs:  # the user's own numerics at this batch size: nothing to compare
        return {**entry, "max_rel_dev": 0.0, "deviation": 0.0, "finite": True, "passed": True}
    known = references.get(json.dumps(ref_knobs, sort_keys=True))
    complete = known is not None and known.complete  # its spread in hand: judge by it
    ref = reference(setup, ref_knobs, references, stop, seeds=1)
    losses, error = (run_losses(setup, knobs, f"trial-{trial.number}", stop, setup.seed)
                     if ref.usable else (None, ""))
    if (losses is not None and ref.losses is not None and not complete
            and passes_on_one_seed(losses, ref.losses, floor)):
        return _one_seed(trial, entry, ref, losses)
    if losses is not None:
        ref = reference(setup, ref_knobs, references, stop)
    spread = ref.spread
    if ref.losses is None or spread is None or losses is None:
        return _unchecked(trial, entry, ref, error)
    return _judge(setup, trial, entry, spread, ref.losses, losses, stop)


def _unchecked(trial: FrozenTrial, entry: dict[str, Any], ref: Reference, error: str
               ) -> dict[str, Any]:
    """A check that could not judge: the user's run diverged (uninformative) or a run failed."""
    why = (f"not checked: {ref.diverged}; a run that diverges says nothing about whether "
           "another arithmetic trains like it (a lower learning rate, or warm-up, would "
           "make the check informative)" if ref.diverged else
           f"not checked: {'its' if error else 'the reference'} run failed "
           f"({error or ref.error})")
    log.warning("numerics of trial %d %s", trial.number, why)
    return {**entry, "max_rel_dev": None, "deviation": None, "finite": None,
            "passed": None, "reason": why, "uninformative": bool(ref.diverged)}


def _one_seed(trial: FrozenTrial, entry: dict[str, Any], ref: Reference, losses: list[float]
              ) -> dict[str, Any]:
    """A pass decided on the user's run at the finalist's seed alone (spread.one_seed_bound):
    its runs at the next seeds could not have refused it, so they were not run."""
    assert ref.losses is not None
    first = tail_loss(ref.losses)
    dev = abs(tail_loss(losses) - first) / max(abs(first), 1e-12)
    bound = one_seed_bound(float(entry["family_tolerance"]))
    entry.update(
        passed=True, finite=True, tolerance=round(bound, 6), deviation=round(dev, 6),
        deviations=[round(dev, 6)], spread=None, one_seed=True,
        reference={"tails": [round(first, 6)], "seeds": [ref.seeds[0]],
                   "center": round(first, 6)},
        max_rel_dev=round(step_deviation(losses, ref.losses), 6),
        losses=[round(v, 6) for v in losses],
        reference_losses=[round(v, 6) for v in ref.losses])
    detail("numerics of trial %d: tail loss %.3g%% from your run at its seed, within %.3g%% "
           "(no spread of your runs at other seeds could refuse it at tolerance %.3g%%: "
           "they were not run)", trial.number, 100 * dev, 100 * bound,
           100 * float(entry["family_tolerance"]))
    return entry


def _judge(setup: StudySetup, trial: FrozenTrial, entry: dict[str, Any], spread: Spread,
           reference: list[float], losses: list[float], stop: StopFlag | None
           ) -> dict[str, Any]:
    """The verdict on a finalist's run against the references' spread; one beyond it runs
    again at the next seed and is refused only when that run is beyond it too."""
    tol = spread.tolerance(float(entry["family_tolerance"]))
    runs = [losses]
    if finite(losses) and spread.deviation(losses) > tol:
        again, _ = run_losses(setup, dict(trial_attrs(trial)["knobs"]),
                           f"trial-{trial.number}-seed{setup.seed + 1}", stop, setup.seed + 1)
        if again is not None:
            runs.append(again)
    devs = [spread.deviation(r) if finite(r) else math.inf for r in runs]
    ok = finite(losses) and min(devs) <= tol
    entry.update(
        passed=ok, finite=finite(losses), tolerance=round(tol, 6),
        deviation=round(min(devs), 6) if math.isfinite(min(devs)) else None,
        deviations=[round(d, 6) if math.isfinite(d) else None for d in devs],
        spread=round(spread.relative, 6), reference=spread.as_dict(),
        max_rel_dev=round(step_deviation(losses, reference), 6) if finite(losses) else None,
        losses=[round(v, 6) for v in losses], reference_losses=[round(v, 6) for v in reference])
    if not ok:
        entry["reason"] = refusal_words(entry, spread, len(losses))
        log.warning("trial %d %s", trial.number, entry["reason"])
    else:
        detail("numerics of trial %d: tail loss %.3g%% from yours (tolerance %.3g%%, your "
                 "runs' spread %.3g%%)", trial.number, 100 * min(devs), 100 * tol,
                 100 * spread.relative)
    return entry


def refusal_words(entry: dict[str, Any], spread: Spread, steps: int) -> str:
    """Why a finalist is refused, with the figures a user checks it by."""
    tol, fams = float(entry["tolerance"]), ", ".join(entry["families"])
    feeding = ", ".join(f"{k}={v}" for k, v in entry["reference_data_path"].items())
    devs = [d for d in entry["deviations"] if d is not None]
    if not entry["finite"]:
        what = f"a non-finite loss within {steps} steps"
    else:
        what = (f"its loss over the last {tail_steps(steps)} of {steps} steps lies "
                f"{devs[0]:.2%} from your configuration's"
                + (f" (at the next seed, {devs[1]:.2%})" if len(devs) > 1 else ""))
    against = f"yours: {spread.words()}, fed as this trial is ({feeding})"
    blame = (f"tolerance {tol:.2%} ({NOISE_MULTIPLE:g}x your runs' spread, at least "
             f"{entry['family_tolerance']:.0%} for {fams})" if entry["same_data"] else
             f"tolerance {tol:.2%}; this trial moves input stages to the device "
             "(transform_split/transfer_dtype), where random augmentations draw from another "
             "generator, so its batches may differ from the reference's: the deviation is not "
             "blamed on a knob family's arithmetic")
    return f"refused: {what}; {against}; {blame}"


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
