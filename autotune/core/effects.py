"""What a configuration changes in training, against the user's own (the baseline's).

The knob registry (core/knobs.py) classes every knob: ``speed`` (only how fast), ``numerics``
(other arithmetic on the same batches) or ``training`` (what is trained). A configuration
trains the same model as the user's when its training knobs are the user's: the study's
same-training answer (results/answers.py) is the fastest such configuration, and the words
here say what the other one changes, in optimizer steps and in the learning rate the linear
scaling rule asks for (Goyal et al. 2017).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.core.knobs import KNOBS

#: The linear scaling rule users apply when they take a larger batch (learning rate x k for
#: batch x k, with a warm-up): Goyal et al., 2017.
LINEAR_RULE = "Goyal et al. 2017, https://arxiv.org/abs/1706.02677"


def training_changes(knobs: Mapping[str, Any], reference: Mapping[str, Any],
                     kept_global_batch: bool = False) -> dict[str, str]:
    """The knobs of class ``training`` whose value in ``knobs`` differs from ``reference``
    (the user's own: the baseline), each with what that does to the training, in words.
    Under ``study.keep_global_batch`` batch_size is the micro-batch: gradient accumulation
    keeps the samples per optimizer step, so it changes no optimizer step. An empty result:
    ``knobs`` trains the same model as ``reference`` (its numerics aside)."""
    out: dict[str, str] = {}
    for knob in KNOBS:  # a knob one side lacks (stored before it existed) ran as ``off``
        new, old = knobs.get(knob.name, knob.off), reference.get(knob.name, knob.off)
        if not knob.changes_training or new == old:
            continue
        if knob.name == "batch_size" and kept_global_batch:
            continue  # a micro-batch: the optimizer still steps on the global batch
        if knob.name == "batch_size" and old is not None and new is not None:
            out[knob.name] = batch_words(int(old), int(new))
        else:
            out[knob.name] = f"{knob.name} {old} -> {new}: {knob.changes_training}"
    return out


def batch_words(old: int, new: int) -> str:
    """A batch size change in optimizer steps per epoch, at the same learning rate."""
    if new >= old:
        return (f"batch_size {old} -> {new}: {_ratio(new / old)}x fewer optimizer steps per "
                "epoch at the same learning rate")
    return (f"batch_size {old} -> {new}: {_ratio(old / new)}x more optimizer steps per epoch, "
            "each on fewer samples, at the same learning rate")


def learning_rate_words(old: int, new: int) -> str:
    """What the linear scaling rule asks of the learning rate for this batch change."""
    return (f"scale the learning rate (linear rule: x{_ratio(new / old)} with warm-up, "
            f"{LINEAR_RULE})")


def _ratio(r: float) -> str:
    return f"{r:.0f}" if abs(r - round(r)) < 1e-9 else f"{r:.2g}"


def same_training_knobs(knobs: Mapping[str, Any], reference: Mapping[str, Any],
                        kept_global_batch: bool = False) -> dict[str, Any]:
    """``knobs`` with every knob that changes training set back to ``reference``'s value: the
    configuration's speed and numerics knobs at the user's own batch size, grouping and
    buffers. A knob made inactive by the values restored takes its ``off`` value."""
    back = training_changes(knobs, reference, kept_global_batch)
    out: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.name not in knobs:
            continue
        value = reference.get(knob.name) if knob.name in back else knobs[knob.name]
        out[knob.name] = knob.off if knob.inactive(out) is not None else value
    return out
