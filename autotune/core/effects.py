"""What a configuration changes in training, against the user's own (the baseline's).

The knob registry (core/knobs.py) classes every knob: ``speed`` (only how fast), ``numerics``
(other arithmetic on the same batches) or ``training`` (what is trained). A configuration
trains the same model as the user's when its training knobs are the user's, the batch counted
as the global batch (micro-batch x accumulation x ranks: core/global_batch.py), so a
micro-batch carried by more or fewer accumulation steps is the same training. The study's
same-training answer (results/answers.py) is the fastest such configuration, and the words here
say what the other one changes: the global batch, the optimizer steps per epoch, and the
learning rate the scaling rule of the optimizer's family asks for (SGD: linear, Goyal et al.
2017; Adam and the adaptive optimizers: square root, Malladi et al. 2022).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from autotune.core.global_batch import accumulation, same_training_batch
from autotune.core.knobs import KNOBS

#: The linear scaling rule for SGD (learning rate x k for batch x k, with a warm-up): Goyal
#: et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour".
LINEAR_RULE = "Goyal et al. 2017, https://arxiv.org/abs/1706.02677"
#: The square-root scaling rule for adaptive optimizers (Adam, RMSprop: learning rate x sqrt(k)
#: for batch x k, 1 - beta x k, epsilon / sqrt(k)): Malladi et al. 2022, "On the SDEs and
#: Scaling Rules for Adaptive Gradient Algorithms".
SQRT_RULE = "Malladi et al. 2022, https://arxiv.org/abs/2205.10287"

#: Optimizer class names (lower case) by family: what each name contains. An optimizer in
#: neither (Lion, Adagrad, Shampoo...) has no rule stated for it here.
_ADAPTIVE = ("adam", "adafactor", "rmsprop", "lamb")
_SGD = ("sgd", "lars")


def optimizer_family(name: str | None) -> str | None:
    """``"sgd"`` (SGD, with or without momentum; LARS), ``"adaptive"`` (the Adam family, its
    8-bit and paged forms, Adafactor, RMSprop, LAMB) or None (unknown, or another family),
    from the optimizer's class name as a trial recorded it."""
    low = (name or "").lower()
    if any(k in low for k in _ADAPTIVE):
        return "adaptive"
    if any(k in low for k in _SGD):
        return "sgd"
    return None


def training_changes(knobs: Mapping[str, Any], reference: Mapping[str, Any],
                     global_batch: int | None = None, ranks: int = 1) -> dict[str, str]:
    """The knobs of class ``training`` whose value in ``knobs`` differs from ``reference``
    (the user's own: the baseline), each with what that does to the training, in words.
    ``global_batch``: the study's global batch per rank where it accumulates (None: it does
    not); batch_size is then a micro-batch, and a change of it that keeps the global batch
    (more or fewer accumulation steps) changes no optimizer step. ``ranks``: the processes a
    trial runs as (each a micro-batch). An empty result: ``knobs`` trains the same model as
    ``reference`` (its numerics aside)."""
    out: dict[str, str] = {}
    for knob in KNOBS:  # a knob one side lacks (stored before it existed) ran as ``off``
        new, old = knobs.get(knob.name, knob.off), reference.get(knob.name, knob.off)
        if not knob.changes_training or new == old:
            continue
        if knob.name == "batch_size" and old is not None and new is not None:
            said = batch_change(int(old), int(new), global_batch, ranks)
            if said:
                out[knob.name] = said
        else:
            out[knob.name] = f"{knob.name} {old} -> {new}: {knob.changes_training}"
    return out


def global_batches(old: int, new: int, global_batch: int | None,
                   ranks: int = 1) -> tuple[int, int]:
    """The global batches (every rank's samples per optimizer step) of the micro-batches
    ``old`` (the user's) and ``new`` in a study whose global batch per rank is ``global_batch``."""
    r = max(1, int(ranks))
    return (old * accumulation(global_batch, old) * r, new * accumulation(global_batch, new) * r)


def batch_change(old: int, new: int, global_batch: int | None, ranks: int = 1) -> str | None:
    """A batch change in words: the global batch and what it does to the optimizer steps
    per epoch; None where the global batch is the same (another split of it)."""
    g_old, g_new = global_batches(old, new, global_batch, ranks)
    if g_old == g_new:
        return None
    r = max(1, int(ranks))
    if global_batch is None and r == 1:
        return batch_words(old, new)
    per_rank = " per rank" if r > 1 else ""
    parts = [f"micro-batch {old} -> {new}{per_rank}" if global_batch else
             f"batch_size {old} -> {new}{per_rank}"]
    if global_batch:
        parts.append(f"accumulation {accumulation(global_batch, old)} -> "
                     f"{accumulation(global_batch, new)}")
    if r > 1:
        parts.append(f"{r} ranks")
    return f"global batch {g_old} -> {g_new} ({', '.join(parts)}): {_steps(g_old, g_new)}"


def batch_words(old: int, new: int) -> str:
    """A batch size change in optimizer steps per epoch, at the same learning rate."""
    return f"batch_size {old} -> {new}: {_steps(old, new)}"


def _steps(old: int, new: int) -> str:
    if new >= old:
        return f"{_ratio(new / old)}x fewer optimizer steps per epoch at the same learning rate"
    return (f"{_ratio(old / new)}x more optimizer steps per epoch, each on fewer samples, at "
            "the same learning rate")


def learning_rate_words(old: int, new: int, optimizer: str | None = None) -> str:
    """What the scaling rule of ``optimizer``'s family asks of the learning rate for a global
    batch ``old`` -> ``new``, with its source: the linear rule for SGD, the square-root rule for
    the adaptive optimizers (the Adam family); both, each with its family, where the
    optimizer's family is not known."""
    k = new / old
    linear, root = f"x{_ratio(k)}", f"x{_ratio(math.sqrt(k))}"
    family = optimizer_family(optimizer)
    if family == "sgd":
        return (f"scale the learning rate {linear} (the linear rule for SGD, which this "
                f"workload's {optimizer} is, with warm-up: {LINEAR_RULE})")
    if family == "adaptive":
        return (f"scale the learning rate {root} (the square-root rule for Adam-family "
                f"optimizers, which this workload's {optimizer} is: {SQRT_RULE})")
    why = (f"{optimizer} is in neither family" if optimizer else
           "the study did not record the optimizer")
    return (f"scale the learning rate {linear} by the linear rule if the optimizer is SGD "
            f"(with warm-up: {LINEAR_RULE}), {root} by the square-root rule if it is "
            f"Adam-family ({SQRT_RULE}); {why}")


def _ratio(r: float) -> str:
    return f"{r:.0f}" if abs(r - round(r)) < 1e-9 else f"{r:.2g}"


def same_training_knobs(knobs: Mapping[str, Any], reference: Mapping[str, Any],
                        global_batch: int | None = None,
                        batch_sizes: Iterable[int] = ()) -> dict[str, Any]:
    """``knobs`` with every knob that changes training set back to ``reference``'s value: the
    configuration's speed and numerics knobs at the user's own training. In a study that
    accumulates (``global_batch``: per rank), a batch_size that changes the global batch
    becomes the micro-batch of ``batch_sizes`` (the study's domain) that keeps the global batch
    and is nearest below it (core/global_batch.same_training_batch), with the accumulation
    that makes up the rest; else the user's own. A knob made inactive by the values restored
    takes its ``off`` value."""
    back = training_changes(knobs, reference, global_batch)
    out: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.name not in knobs:
            continue
        value = reference.get(knob.name) if knob.name in back else knobs[knob.name]
        if knob.name == "batch_size" and knob.name in back and global_batch:
            value = same_training_batch(int(knobs[knob.name]), global_batch,
                                        [*batch_sizes, int(reference[knob.name])])
        out[knob.name] = knob.off if knob.inactive(out) is not None else value
    return out
