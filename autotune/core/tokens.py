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
tokens; without one (a packed batch: ``input_ids`` of shape (1, total) with ``position_ids``,
or a batch that was never padded) every id is real. A workload with another layout declares
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
        # Packed (DataCollatorWithFlattening: no mask, position_ids restart per sample) or
        # unpadded: every id is a real token. A mask of another shape (a 4-D attention bias)
        # does not say which ids are padding.
        return TokenCount(computed, computed)
    if mask.device.type != "cpu":
        return None
    return TokenCount(int(torch.count_nonzero(mask)), computed)


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
