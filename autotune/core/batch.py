"""Batches of any structure: the one convention every knob that touches a batch goes through.

A loader batch is either

* a pair ``(inputs, targets)`` (a tuple or list of two), or
* a Mapping (a dict, or a dict-like such as Hugging Face's ``BatchEncoding`` from a data
  collator, labels inside): inputs = the mapping, targets = ``None``.

A workload with another layout overrides ``Workload.split_batch``. Inputs and targets may be
tensors, tuples, lists, dicts (dict subclasses are rebuilt as their own type) or nested mixes;
non-tensor leaves (strings, ids, ``None``) pass through untouched. The model is called
``model(**inputs)`` when inputs is a Mapping (Hugging Face's convention), else
``model(inputs)``; its loss defaults to the model's own (``outputs.loss`` or
``outputs["loss"]``), so an HF model that computes its loss from ``labels`` needs no ``loss``.

Pinning, the copy, the device transform, channels_last and CUDA Graph static inputs all walk
the structure with ``tree_map``, so a knob applied to a tensor batch applies the same way to a
dict of them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch


def tree_map(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """``fn`` applied to every tensor leaf of ``obj``; the structure is rebuilt around the
    results. Mutable mappings are shallow-copied and updated (as the DataLoader's pinning does),
    so a ``BatchEncoding`` stays one, with its extra attributes; named tuples stay named."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (str, bytes)):
        return obj
    if isinstance(obj, Mapping):
        mapped = {k: tree_map(fn, v) for k, v in obj.items()}
        if isinstance(obj, MutableMapping):
            try:
                clone = copy.copy(obj)
                clone.update(mapped)
                return clone
            except Exception:  # noqa: BLE001 - an uncopyable mapping: a plain dict will do
                return mapped
        try:
            return type(obj)(mapped)  # type: ignore[call-arg]
        except Exception:  # noqa: BLE001
            return mapped
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(tree_map(fn, v) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(tree_map(fn, v) for v in obj)
    return obj


def tensors(obj: Any) -> list[torch.Tensor]:
    """The tensor leaves of ``obj``, in ``tree_map``'s order."""
    found: list[torch.Tensor] = []
    tree_map(lambda t: found.append(t), obj)
    return found


def shapes_of(obj: Any) -> tuple[tuple[int, ...], ...]:
    """The shapes of every tensor leaf: two batches with the same signature compile, capture
    and tune alike; a padding collator gives each batch its own."""
    return tuple(tuple(t.shape) for t in tensors(obj))


class ShapeLog:
    """The input shapes seen over a run of batches: whether they vary is measured, not assumed
    (a workload's ``static_shapes`` is what its author believes)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[tuple[int, ...], ...], int] = {}
        self.batches = 0

    def add(self, inputs: Any) -> None:
        sig = shapes_of(inputs)
        self.seen[sig] = self.seen.get(sig, 0) + 1
        self.batches += 1

    def summary(self) -> dict[str, Any]:
        """``{"distinct": n, "batches": m, "examples": [...]}`` (the three most frequent)."""
        common = sorted(self.seen, key=lambda s: -self.seen[s])[:3]
        return {"distinct": len(self.seen), "batches": self.batches,
                "examples": [" ".join("x".join(map(str, shape)) for shape in sig) for sig in common]}


def measure_shapes(dataset: Any, collate: Callable[[list[Any]], Any] | None, batch_size: int,
                   batches: int = 8, seed: int = 0) -> dict[str, Any]:
    """Draw ``batches`` random batches through ``collate`` in this process (no workers) and
    log their shapes, and how many of them hold padding tokens (``"padded"``, by the rule of
    ``core/tokens.py``): the adapters decide ``static_shapes`` and whether the batches are
    padded sequences from this before any trial, whatever function or class pads them."""
    from torch.utils.data import default_collate

    from autotune.core.tokens import has_padding

    g = torch.Generator().manual_seed(seed)
    n = len(dataset)
    log = ShapeLog()
    padded = 0
    for _ in range(batches):
        idx = torch.randint(0, n, (min(batch_size, n),), generator=g).tolist()
        batch = (collate or default_collate)([dataset[i] for i in idx])
        log.add(batch)
        try:
            padded += has_padding(split_batch(batch)[0])
        except ValueError:  # a layout only the workload's own split_batch reads: no tokens
            pass
    return {**log.summary(), "padded": padded}


def split_batch(batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a loader batch under the convention above."""
    if isinstance(batch, Mapping):
        return batch, None
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and not hasattr(batch, "_fields"):
        return batch[0], batch[1]
    kind = type(batch).__name__
    size = f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""
    raise ValueError(
        f"the loader yielded a {kind}{size}; autotune expects a batch that is either a pair "
        "(inputs, targets) or a Mapping of model inputs (a dict or BatchEncoding, labels "
        "inside). Override Workload.split_batch(batch) -> (inputs, targets) for another layout."
    )


def move(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Every tensor of ``obj`` on ``device`` (an async copy from pinned memory if asked)."""
    return tree_map(lambda t: t.to(device, non_blocking=non_blocking), obj)


def pin(obj: Any) -> Any:
    """Every tensor of ``obj`` in page-locked memory (what DataLoader(pin_memory=True) does)."""
    return tree_map(lambda t: t.pin_memory(), obj)


def channels_last(obj: Any) -> Any:
    """4-D tensors of ``obj`` (images: N, C, H, W) in channels_last; the rest unchanged."""
    return tree_map(
        lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t, obj)


def static_copy(obj: Any) -> Any:
    """A structure of fresh tensors shaped like ``obj``'s: a CUDA Graph's static inputs."""
    return tree_map(lambda t: t.clone(), obj)


def copy_into(static: Any, new: Any, non_blocking: bool = True) -> None:
    """Copy each tensor leaf of ``new`` into the matching leaf of ``static`` (same structure,
    same shapes: a CUDA Graph replays on the static tensors it captured)."""
    dst, src = tensors(static), tensors(new)
    if len(dst) != len(src):
        raise ValueError(
            f"the batch has {len(src)} tensors but the captured CUDA Graph has {len(dst)}: "
            "batches must keep one structure (set static_shapes = False on the workload)")
    for d, s in zip(dst, src, strict=True):
        d.copy_(s, non_blocking=non_blocking)


def call_model(model: Callable[..., Any], inputs: Any) -> Any:
    """``model(**inputs)`` for a Mapping (Hugging Face's convention), else ``model(inputs)``."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(inputs)


def model_loss(outputs: Any) -> torch.Tensor:
    """The loss the model computed itself: ``outputs.loss`` (a Hugging Face ModelOutput) or
    ``outputs["loss"]``; raise NotImplementedError naming what to implement otherwise."""
    loss = getattr(outputs, "loss", None)
    if loss is None and isinstance(outputs, Mapping):
        loss = outputs.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    raise NotImplementedError(
        f"the model returned a {type(outputs).__name__} without a loss (no .loss attribute or "
        "'loss' key). Implement Workload.loss(outputs, targets) to compute it, or have the "
        "model compute it (e.g. pass labels to a Hugging Face model)."
    )
