"""The user's global batch: the unit of training.

An optimizer step averages the gradients of ``micro-batch x accumulation x ranks`` samples: a
user who trains with ``per_device_train_batch_size=4, gradient_accumulation_steps=4`` trains
on a global batch of 16 per rank, whatever micro-batch carries it. A workload declares its
accumulation in its defaults (``defaults["grad_accum"]``: the Hugging Face adapter reads
``gradient_accumulation_steps``, Lightning's ``accumulate_grad_batches``); the study's global
batch per rank is then ``G = batch_size x grad_accum`` of the baseline.

A study *accumulates* when the user does (``grad_accum > 1``) or when ``study.keep_global_batch``
asks it to. Then a trial's micro-batch ``b`` that divides ``G`` runs ``G / b`` micro-batches per
optimizer step: the same training as the user's, only a different split of it; a micro-batch
that does not divide ``G`` (larger than ``G``, or smaller and not a divisor: 16 or 5 of a
global batch of 24) steps on its own, a global batch of its own (a change of training, said as
such: core/effects.py). The batch_size domain holds divisors of ``G`` beside its powers of two
(``dividing_batches``), so the micro-batches that keep the user's training are tried. A study
that does not accumulate runs every trial at accumulation 1, as autotune always did.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from autotune.core.workload import Workload, WorkloadError

#: The key of ``Workload.defaults`` that declares the user's gradient accumulation.
GRAD_ACCUM = "grad_accum"
#: The smallest micro-batch of the global-batch ladder is the global batch / 2**this.
MAX_ACCUM_LOG2 = 3


def declared_accumulation(workload: Workload) -> int:
    """The gradient-accumulation steps the workload's user trains with (1 when it declares
    none). A value that is not a positive whole number is refused, naming it."""
    value: Any = workload.defaults.get(GRAD_ACCUM, 1)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(
            f"workload {workload.name}: defaults['{GRAD_ACCUM}']={value!r} is not a number of "
            "gradient-accumulation steps; it must be a whole number >= 1 (micro-batches per "
            "optimizer step: 1 when the workload does not accumulate).")
    return value


def study_global_batch(micro_batch: int, grad_accum: int, keep: bool) -> int | None:
    """The study's global batch per rank ``G`` (the baseline's micro-batch x its
    accumulation) where the study accumulates: the user does (``grad_accum > 1``), or
    ``study.keep_global_batch`` (``keep``) asks it to; None where every trial runs unaccumulated."""
    if grad_accum > 1 or keep:
        return int(micro_batch) * int(grad_accum)
    return None


def accumulation(global_batch: int | None, batch_size: int) -> int:
    """Micro-batches per optimizer step for a micro-batch of ``batch_size`` in a study whose
    global batch per rank is ``global_batch`` (None: the study does not accumulate). A
    micro-batch that divides it accumulates ``G / b``; any other steps on its own."""
    b = int(batch_size)
    if not global_batch or b < 1 or global_batch % b:
        return 1
    return int(global_batch) // b


def dividing_batches(global_batch: int, values: Iterable[int], least: int = 1) -> set[int]:
    """Micro-batches that keep the global batch ``G``: for each of ``values`` (a domain's powers
    of two), the largest divisor of ``G`` not above it (12 for 16 of a global batch of 24), and
    the ladder ``G``, ``G/2``, ``G/4``, ``G/8`` where whole (as ``study.keep_global_batch``
    searches); none below ``least``. A bounded set: not every divisor of a highly composite
    ``G``, but one near each size the domain tries and the few largest."""
    g = int(global_batch)
    near = {max(d for d in range(1, min(int(v), g) + 1) if g % d == 0) for v in values if v >= 1}
    ladder = {g // 2**k for k in range(MAX_ACCUM_LOG2 + 1) if g % 2**k == 0}
    return {b for b in near | ladder if b >= least}


def same_training_batch(batch_size: int, global_batch: int, values: Iterable[int]) -> int:
    """The micro-batch that keeps the global batch ``G`` closest to ``batch_size``'s speed: the
    micro-batch itself where it divides ``G``, else the largest of ``values`` (the study's
    batch_size domain) no larger than ``batch_size`` and ``G`` that divides ``G``; ``G``
    itself where none does."""
    b, g = int(batch_size), int(global_batch)
    if b >= 1 and g % b == 0:
        return b
    fits = [int(v) for v in values if int(v) <= min(b, g) and g % int(v) == 0]
    return max(fits) if fits else g


def batches(knobs: dict[str, Any], global_batch: int | None, ranks: int = 1) -> tuple[int, int, int]:
    """``(micro-batch, accumulation, global batch)`` of a knob assignment in a study whose
    global batch per rank is ``global_batch``: the global batch counts every rank's samples."""
    b = int(knobs["batch_size"])
    a = accumulation(global_batch, b)
    return b, a, b * a * max(1, int(ranks))
