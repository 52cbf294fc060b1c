"""Seed 004's workload: ResNet-18 on a fake CIFAR-10, with the tutorial's input pipeline.

Random uint8 32x32x3 images go through PIL resize to ``image_size``, then either ToTensor +
Normalize on the host (float32 transfer, the tutorial's baseline) or PILToTensor on the host and
float/normalize on the device (uint8 transfer, seed 004's optimization #4).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

from autotune.workload import Workload


class FakeCIFAR(Dataset):
    def __init__(self, n_images: int, transform: Any, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.data = rng.integers(0, 256, size=(n_images, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 10, size=n_images).tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.data[index])), self.targets[index]


class ResNet18Workload(Workload):
    name = "resnet18"
    splits_transform = True
    image_inputs = True
    static_shapes = True

    def __init__(self, image_size: int = 224, n_images: int = 10000, batch_size: int = 32,
                 lr: float = 0.001):
        self.image_size, self.n_images, self.lr = image_size, n_images, lr
        # The tutorial's loop as written: batch 32, loader in the training process.
        self.defaults = {"batch_size": batch_size, "num_workers": 0, "transfer_dtype": "float32"}

    def dataset(self, transfer_dtype: str) -> Dataset:
        if transfer_dtype == "uint8":
            transform = T.Compose([T.Resize(self.image_size), T.PILToTensor()])
        else:
            transform = T.Compose(
                [T.Resize(self.image_size), T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)]
            )
        return FakeCIFAR(self.n_images, transform)

    def device_transform(self, inputs: torch.Tensor) -> torch.Tensor:
        return (inputs.to(torch.float32) / 255.0 - 0.5) / 0.5

    def model(self) -> nn.Module:
        return torchvision.models.resnet18(weights=None, num_classes=10)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9, **impl)

    def cpu_sized(self) -> ResNet18Workload:
        small = ResNet18Workload(64, 2048, self.defaults["batch_size"], self.lr)
        return small

    def describe(self) -> str:
        return f"resnet18 (image_size={self.image_size}, {self.n_images} fake CIFAR images)"
