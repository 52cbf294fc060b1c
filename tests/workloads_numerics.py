"""Workloads for the numerics check: a recipe whose first steps are chaotic, and one whose
arithmetic a knob really breaks."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from autotune.workloads.mlp import MLPWorkload


class ChaoticConvNet(MLPWorkload):
    """A 6-layer BatchNorm convnet under SGD at a high learning rate with momentum 0.9,
    learning a teacher's labels of 16x16 images: its first steps are chaotic as a ResNet's
    at lr 0.1 are (the loss jumps from 2.3 to 5.5 and back), so two fp32 runs differing only in
    their seed (initialization and data order) differ step by step by tens of percent, and a
    bf16 run's rounding grows to more than 10% within 16 steps, while each trains alike."""

    name = "chaotic-convnet"
    image_inputs = True

    def __init__(self, lr: float = 3.0, batch_size: int = 16, n: int = 512, width: int = 16,
                 depth: int = 6):
        super().__init__(batch_size=batch_size, lr=lr)
        self.n, self.width, self.depth = n, width, depth

    def dataset(self, transfer_dtype: str) -> Dataset:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n, 3, 16, 16, generator=g)
        teacher = torch.randn(3 * 4, 10, generator=g)
        y = (nn.functional.adaptive_avg_pool2d(x, 2).flatten(1) @ teacher).argmax(1)
        return TensorDataset(x, y)

    def model(self) -> nn.Module:
        w = self.width
        layers: list[nn.Module] = [nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
        for _ in range(self.depth - 1):
            layers += [nn.Conv2d(w, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU()]
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * w, 10))


class WrongCast(MLPWorkload):
    """An MLP learning a teacher's labels (4 classes, 16 features: its loss halves within 10
    steps at lr 0.5) whose loss adds a large offset to the logits in the model's output dtype:
    harmless in fp32 (the softmax does not see a shift; fp32 keeps 1/2048 of a unit at 4096),
    ruinous under bf16 autocast, whose 8 mantissa bits round logits near 4096 to multiples of
    32: a wrong cast, the kind of fault the numerics check is for. Each step sleeps
    ``step_ms`` (a fixed cost per step, paid less often by a larger batch) and 3x as long in
    fp32, so that bf16 is the fastest and a larger batch without it the next."""

    name = "wrong-cast"

    def __init__(self, batch_size: int = 16, lr: float = 0.5, step_ms: float = 10.0,
                 offset: float = 4096.0):
        super().__init__(n_samples=1024, in_features=16, classes=4, batch_size=batch_size,
                         lr=lr)
        self.step_s, self.offset = step_ms / 1e3, offset

    def dataset(self, transfer_dtype: str) -> Dataset:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.n_samples, self.in_features, generator=g)
        teacher = torch.randn(self.in_features, self.classes, generator=g)
        return TensorDataset(x, (x @ teacher).argmax(1))

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        low = outputs.dtype != torch.float32
        time.sleep(self.step_s if low else 3 * self.step_s)
        return nn.functional.cross_entropy(outputs + self.offset, targets)
