"""Input pipelines in stages, split between the host (per sample) and the device (per batch).

A workload that declares ``stages()`` lets the ``transform_split`` knob choose where its input
pipeline crosses to the device: ``transform_split = k`` runs the first ``k`` stages on each
sample in the DataLoader (workers), then the batch is copied, and the remaining stages run on
the whole batch on the training device. Shipping raw 32x32 uint8 images and resizing them on
the GPU moves the host's heaviest work (the fourth optimization of Chaim Rand's "PyTorch Model
Performance Analysis and Optimization", 2023: move work from the host to the device) and
copies 49x fewer bytes than a 224 px float32 batch.

A stage is valid on the device only if it says how to run on a batch (``Stage.device``), and a
split point ``k`` is valid only when every stage from ``k`` on has a batched version; per-sample
random augmentation without one stays on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate


@dataclass(frozen=True)
class Stage:
    """One step of a workload's input pipeline.

    ``host``: the per-sample version, run in the DataLoader on one item's inputs.
    ``device``: the batched version, run after the copy on the whole batch's inputs (a stacked
    tensor, or a list of tensors when ``ragged``); None = this stage can only run on the host.
    ``ragged``: the stage's input items differ in shape (encoded bytes), so a batch of them
    is a list of tensors, not a stacked tensor.
    ``host_input``: the batched version reads host tensors and writes its output on the device
    itself (``torchvision.io.decode_jpeg(..., device=...)`` takes CPU byte tensors): its batch
    is not copied first, and it is called as ``device(batch, device=target)``.
    """

    name: str
    host: Callable[[Any], Any]
    device: Callable[..., Any] | None = None
    ragged: bool = False
    host_input: bool = False


def split_points(stages: Sequence[Stage]) -> list[int]:
    """The valid values of ``transform_split``: k such that stages k.. all run on a batch.
    ``len(stages)`` (everything on the host) is always valid."""
    points = [len(stages)]
    for k in range(len(stages) - 1, -1, -1):
        if stages[k].device is None:
            break
        points.append(k)
    return sorted(points)


def check_split(stages: Sequence[Stage], split: int) -> None:
    """A ``transform_split`` that the stages do not allow is an error naming the valid ones."""
    valid = split_points(stages)
    if split not in valid:
        names = ", ".join(s.name for s in stages) or "none"
        raise ValueError(
            f"transform_split={split!r} is not valid for this workload: its input stages are "
            f"[{names}] and the split must be one of {valid} (the number of stages run on the "
            "host; every stage after the split needs a batched device version)."
        )


class StagedDataset(Dataset):
    """The workload's source dataset with the host stages applied to each item's inputs."""

    def __init__(self, source: Dataset, host_stages: Sequence[Stage]):
        self.source = source
        self.host_stages = list(host_stages)

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        inputs, target = self.source[index]
        for stage in self.host_stages:
            inputs = stage.host(inputs)
        return inputs, target


def ragged_collate(items: list[tuple[Any, Any]]) -> tuple[list[torch.Tensor], Any]:
    """Batch items whose inputs differ in shape (encoded bytes): the inputs stay a list of
    tensors (a batch structure; each one is moved on its own), the targets are stacked.

    The list's tensors are views of one fresh buffer, in shared memory inside a DataLoader
    worker (as ``default_collate`` does for a stacked batch): a worker then hands the batch
    over in one storage, whatever storage each item came in (a file reader's buffer may not
    be shareable at all)."""
    inputs = [x for x, _ in items]
    numel = sum(x.numel() for x in inputs)
    flat: torch.Tensor | None = None
    if torch.utils.data.get_worker_info() is not None:
        storage = inputs[0]._typed_storage()._new_shared(numel, device=inputs[0].device)
        flat = inputs[0].new(storage).resize_(numel)
    flat = torch.cat([x.reshape(-1) for x in inputs], out=flat)
    parts = flat.split([x.numel() for x in inputs])
    views = [v.view(x.shape) for v, x in zip(parts, inputs, strict=True)]
    return views, default_collate([t for _, t in items])


def collate_for(stages: Sequence[Stage], split: int) -> Callable[[Any], Any] | None:
    """The loader's collate_fn for this split: a list when the first device stage takes
    ragged inputs, else the DataLoader's default (None)."""
    return ragged_collate if split < len(stages) and stages[split].ragged else None


def run_device_stages(stages: Sequence[Stage], inputs: Any, device: torch.device) -> Any:
    """The device part of the pipeline, on the whole batch, in order."""
    for stage in stages:
        assert stage.device is not None  # check_split guarantees it
        inputs = stage.device(inputs, device=device) if stage.host_input else stage.device(inputs)
    return inputs
