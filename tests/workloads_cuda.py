"""Workloads that fail on a real CUDA device the way training code does (GPU tests only).

- ``HugeActivation``: a batch whose activations cannot fit: the caching allocator raises a real
  CUDA out-of-memory in the forward pass;
- ``IllegalAddress``: the step launches a (Triton) kernel that stores far outside any
  allocation: "an illegal memory access was encountered", a sticky error that poisons the CUDA
  context of the process for good.
A host sync inside a captured CUDA Graph needs no workload of its own: SyncWorkload's .item()
reads under cuda_graphs=True (tests/workloads_diag.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from autotune.workloads.mlp import MLPWorkload


class HugeActivation(MLPWorkload):
    """Linear(64 -> 2^22) on the batch: 16 MiB of activation per sample; at batch 2^14 that is
    256 GiB, past any single GPU."""

    def __init__(self, width: int = 2**22, **kw: Any):
        super().__init__(**{"n_samples": 2**15, "batch_size": 2**14, **kw})
        self.width = width

    def model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(64, self.width), nn.ReLU(), nn.Linear(self.width, 10))


def _store_far(t: torch.Tensor) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def store_far(ptr, offset):  # type: ignore[no-untyped-def]
        tl.store(ptr + offset, 1.0)

    store_far[(1,)](t, 1 << 40)  # 4 TiB past the tensor: no mapping there


class IllegalAddress(MLPWorkload):
    """The third step writes outside its memory (the first two warm the trial up)."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 3:
            _store_far(outputs)
            torch.cuda.synchronize()
        return super().loss(outputs, targets)
