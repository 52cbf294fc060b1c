"""A tiny MLP classifier on random features: fast enough for tests and smoke runs."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from autotune.core.workload import Workload


class MLPWorkload(Workload):
    name = "mlp"
    static_shapes = True

    def __init__(
        self,
        n_samples: int = 4096,
        in_features: int = 64,
        hidden: int = 128,
        depth: int = 2,
        classes: int = 10,
        batch_size: int = 32,
        lr: float = 0.01,
        grad_accum: int = 1,
    ):
        """``batch_size`` and ``grad_accum``: the user's micro-batch and gradient-accumulation
        steps (the global batch is their product: core/global_batch.py)."""
        self.n_samples, self.in_features, self.hidden = n_samples, in_features, hidden
        self.depth, self.classes, self.lr = depth, classes, lr
        self.defaults = {"batch_size": batch_size, "num_workers": 0, "grad_accum": grad_accum}

    def dataset(self, transfer_dtype: str) -> Dataset:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n_samples, self.in_features, generator=g)
        y = torch.randint(0, self.classes, (self.n_samples,), generator=g)
        return TensorDataset(x, y)

    def model(self) -> nn.Module:
        layers: list[nn.Module] = []
        width = self.in_features
        for _ in range(self.depth):
            layers += [nn.Linear(width, self.hidden), nn.ReLU()]
            width = self.hidden
        return nn.Sequential(*layers, nn.Linear(width, self.classes))

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9, **impl)
