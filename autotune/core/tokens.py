"""Tokens as the unit of a language model's throughput.

With variable-length samples, samples/s rewards short batches: a configuration that happens to
see short sequences reads fast. What a language model's user counts is tokens, and the tokens
that matter are the real ones: a padding collator (``DataCollatorWithPadding``) pads each batch
to its longest sample, and the model computes those pad tokens and throws them away. So a
batch is counted twice:

- **real** tokens: the non-padding ones, counted the same way whatever made the batch (a
  padding collator, one with ``pad_to_multiple_of``, length-grouped batches, or padding-free
  packing with ``DataCollatorWithFlattening``): the same samples give the same count;
- **computed** tokens: every position of ``input_ids``, padding included: the work done.

``1 - real / computed`` is the batch's padding share: what length grouping or packing can win.

The rule (Hugging Face conventions): inputs that are a Mapping with ``input_ids`` carry tokens;
where there is an ``attention_mask`` of the same shape, its non-zero entries are the real
tokens. Without one, ``labels`` of the same shape ignored (-100) on a trailing run of
positions whose length differs between rows is right padding (a collator that pads each row to
the batch's longest and masks only the labels: a causal model never attends forward to it);
otherwise (a packed batch: ``input_ids`` of shape (1, total) with ``position_ids``, or a batch
that was never padded) every id is real. Whatever builds the batch (a Hugging Face collator, a
plain function, a class), the batch says whether it is padded. A workload with another layout declares
its own rule (``Workload.tokens``). Counting reads the loader's batch on the host, before it is
copied: a mask still on the host costs a sum, never a wait on the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

#: The two units a study's objective may be in. A study stores its unit; one without (made
#: before tokens were counted) is in samples/s.
SAMPLES, TOKENS = "samples/s", "tokens/s"
UNITS = (SAMPLES, TOKENS)
#: The label value Hugging Face losses ignore (``CrossEntropyLoss(ignore_index=-100)``).
IGNORED = -100


@dataclass(frozen=True)
class TokenCount:
    """One batch's real (non-padding) and computed (padding included) tokens."""

    real: int
    computed: int

    @property
    def padding_share(self) -> float:
        """The share of the computed tokens that are padding (0 for an empty batch)."""
        return 1.0 - self.real / self.computed if self.computed > 0 else 0.0


def count_tokens(inputs: Any) -> TokenCount | None:
    """The tokens of a batch's inputs by the Hugging Face convention above; None when the
    inputs carry no ``input_ids`` tensor, or its mask is already on a device (summing it there
    would wait on the device)."""
    if not isinstance(inputs, Mapping):
        return None
    ids = inputs.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        return None
    computed = ids.numel()
    mask = inputs.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(ids.shape):
        # No mask: padding only the labels say (a right-padded batch), else none. A mask of
        # another shape (a 4-D attention bias) does not say which ids are padding.
        return _by_labels(inputs, ids)
    if mask.device.type != "cpu":
        return None
    return TokenCount(int(torch.count_nonzero(mask)), computed)


def _by_labels(inputs: Mapping[str, Any], ids: torch.Tensor) -> TokenCount:
    """Right padding read from the labels alone: each row's trailing run of ignored labels
    (-100), when the runs differ between rows (rows padded to the batch's longest). Runs of one
    length in every row are not padding (labels shifted by the user, the last one ignored); a
    packed batch (``position_ids``: DataCollatorWithFlattening ignores each sample's first
    label) has none."""
    computed = ids.numel()
    labels = inputs.get("labels")
    if (not isinstance(labels, torch.Tensor) or tuple(labels.shape) != tuple(ids.shape)
            or ids.dim() != 2 or "position_ids" in inputs or labels.device.type != "cpu"):
        # Labels already on a device are not read (that would wait on it): every id counts.
        return TokenCount(computed, computed)
    # The trailing run's length per row: ignored positions counted from the right until the
    # first kept one (a cumulative product of the flipped "ignored" flags).
    trailing = labels.eq(IGNORED).flip(-1).int().cumprod(-1).sum(-1)
    if trailing.numel() < 2 or int(trailing.max()) == int(trailing.min()):
        return TokenCount(computed, computed)
    return TokenCount(computed - int(trailing.sum()), computed)


def has_padding(inputs: Any) -> bool:
    """Whether a batch's inputs hold padding tokens by the rule above (its padding share is
    above 0): what makes length grouping and packing worth offering."""
    count = count_tokens(inputs)
    return count is not None and count.real < count.computed


def every_id_real(ids: torch.Tensor) -> tuple[int, int]:
    """The rule of a workload whose token ids are never padded (fixed-length sequences, e.g.
    ``(ids, targets)`` pairs of a language model on a token stream): every id is a token."""
    return ids.numel(), ids.numel()


def unit_of(stored: str | None) -> str:
    """A stored unit, read: a study or trial stored before units were recorded is samples/s."""
    return stored if stored in UNITS else SAMPLES


def unit_word(unit: str | None) -> str:
    """'tokens' or 'samples': the noun of a unit, for headers like 'best tokens/s'."""
    return unit_of(unit).split("/")[0]


class CrossUnit(ValueError):
    """Two figures in different units (a tokens/s study against a samples/s one) were about to
    be compared: refused, with both units named."""


def same_unit(a: str | None, b: str | None, what: str) -> str:
    """The common unit of two figures; raise ``CrossUnit`` naming ``what`` when they differ."""
    ua, ub = unit_of(a), unit_of(b)
    if ua != ub:
        raise CrossUnit(
            f"{what}: one is measured in {ua} and the other in {ub}; throughputs in different "
            "units cannot be compared (a workload with token inputs is measured in tokens/s, "
            "real tokens only). Compare studies of the same workload, or rerun the older one.")
    return ua
