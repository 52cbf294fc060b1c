"""ResNet-18 on a fake CIFAR-10, with the input pipeline of PyTorch's profiler tutorial
(https://pytorch.org/tutorials/intermediate/tensorboard_profiler_tutorial.html), the workload
Chaim Rand optimizes by hand in "PyTorch Model Performance Analysis and Optimization" (2023).

Random uint8 32x32x3 images go through the tutorial's transform (PIL resize to ``image_size``,
ToTensor, Normalize), declared in stages so that ``transform_split`` can move its tail to the
device: 3 = all on the host (the tutorial's baseline, float32 crosses the bus), 1 = PIL resize
on the host and uint8 crosses (that post's optimization #4), 0 = the raw 32x32 uint8 image
crosses and is resized on the device (bilinear, antialias): 49x fewer bytes than 224 px float32
and no per-image PIL work in the loader. The device resize differs from PIL's by a few
grey levels at most (tests/test_stages.py bounds it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torchvision
import torchvision.transforms.v2.functional as F
from PIL import Image
from torch import nn
from torch.utils.data import Dataset

from autotune.core.stages import Stage
from autotune.core.workload import Workload


class FakeCIFAR(Dataset):
    """Random CIFAR-sized images as uint8 CHW tensors (the raw pixels a real dataset holds)."""

    def __init__(self, n_images: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        data = rng.integers(0, 256, size=(n_images, 3, 32, 32), dtype=np.uint8)
        self.data = torch.from_numpy(data)
        self.targets = rng.integers(0, 10, size=n_images).tolist()

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.data[index], self.targets[index]


def to_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] to float32 [0, 1], as ToTensor does (one sample or a batch)."""
    return x.to(torch.float32) / 255.0


def normalize(x: torch.Tensor) -> torch.Tensor:
    """The tutorial's Normalize((0.5,)*3, (0.5,)*3): the same mean and std for every channel,
    so one expression serves a CHW sample and an NCHW batch."""
    return (x - 0.5) / 0.5


class ResNet18Step:
    """The tutorial's model, loss and optimizer (10 classes, SGD with momentum), shared by every
    ResNet-18 workload; they differ only in where their images come from."""

    lr: float

    def model(self) -> nn.Module:
        return torchvision.models.resnet18(weights=None, num_classes=10)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9, **impl)


class ResNet18Workload(ResNet18Step, Workload):
    name = "resnet18"
    image_inputs = True
    static_shapes = True

    def __init__(self, image_size: int = 224, n_images: int = 10000, batch_size: int = 32,
                 lr: float = 0.001):
        self.image_size, self.n_images, self.lr = image_size, n_images, lr
        # The tutorial's loop as written: batch 32, loader in the training process, every
        # transform on the host (transform_split defaults to all stages on the host).
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def raw_dataset(self) -> Dataset:
        return FakeCIFAR(self.n_images)

    def stages(self) -> list[Stage]:
        return [
            Stage("resize", self._pil_resize, self._batch_resize),
            Stage("to_float", to_float, to_float),
            Stage("normalize", normalize, normalize),
        ]

    def _pil_resize(self, image: torch.Tensor) -> torch.Tensor:
        """The tutorial's T.Resize on a PIL image (bilinear; PIL antialiases), back to uint8 CHW."""
        pil = Image.fromarray(image.permute(1, 2, 0).numpy())
        pil = pil.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        return F.pil_to_tensor(pil)

    def _batch_resize(self, batch: torch.Tensor) -> torch.Tensor:
        """The same resize on the whole NCHW uint8 batch, on its device."""
        return F.resize(batch, [self.image_size, self.image_size], antialias=True)

    def cpu_sized(self) -> ResNet18Workload:
        small = ResNet18Workload(64, 2048, self.defaults["batch_size"], self.lr)
        return small

    def describe(self) -> str:
        return (f"resnet18 (image_size={self.image_size}, {self.n_images} fake CIFAR images; "
                "input stages: resize, to_float, normalize)")
