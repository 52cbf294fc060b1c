"""An ordinary image pipeline with random augmentation: JPEG files through torchvision's
ImageFolder, RandomResizedCrop and a horizontal flip per sample, in the DataLoader (as nearly
every real vision pipeline does). Its random crops depend on which process draws them: the
numerics check must compare runs that saw the same crops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchvision import transforms
from torchvision.datasets import ImageFolder

from autotune.core.workload import Workload
from autotune.workloads.jpeg_folder import JPEGFolderWorkload, write_random_jpegs


class AugmentedJPEGs(Workload):
    name = "augmented-jpegs"
    image_inputs = True
    static_shapes = True

    def __init__(self, root: str, n_images: int = 96, image_size: int = 32, batch_size: int = 16):
        self.root, self.n_images, self.image_size = Path(root), n_images, image_size
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str = "float32") -> ImageFolder:
        if not self.root.is_dir():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            write_random_jpegs(self.root, self.n_images, classes=4)
        augment = transforms.Compose([
            transforms.RandomResizedCrop(self.image_size, antialias=True),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
        ])
        return ImageFolder(str(self.root), transform=augment)

    def model(self) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(16 * 16, 4))

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-2, **impl)

    def describe(self) -> str:
        return f"augmented JPEGs ({self.n_images} files, RandomResizedCrop + flip, {self.image_size} px)"


class TinyJPEGFolder(JPEGFolderWorkload):
    """The shipped JPEG workload's input stages (decode, resize, to_float, normalize) feeding a
    tiny model: the loader, not the step, is what a window of it measures."""

    name = "tiny-jpeg"

    def model(self) -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(8, 10))

    def cpu_sized(self) -> TinyJPEGFolder:
        return self
