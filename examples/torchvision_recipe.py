"""torchvision's reference classification recipe as a workload: ResNet-18 on an ImageFolder
of JPEGs, RandomResizedCrop and a horizontal flip per image, SGD at lr 0.1 with momentum 0.9
and weight decay 1e-4, batch 32 from 2 loader workers (the recipe's ``-b 32 -j 2``;
references/classification/train.py and presets.py in pytorch/vision).

Its first steps are chaotic (lr 0.1 with momentum from a random initialization): two runs of
the user's own configuration that differ only in their seed already part within a few steps,
which is the spread the numerics check judges a bf16 or compiled finalist against
(docs/guide/faq.md, "The numerics check refused bf16").

    autotune workload._target_=examples.torchvision_recipe.TorchvisionRecipe device=cpu

Without ``root`` it reads the random JPEGs the ``jpeg`` workload writes to its cache folder
(nothing is downloaded).
"""

from __future__ import annotations

import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms import v2

from autotune.core.stages import Stage
from autotune.workloads.jpeg_folder import JPEGFolderWorkload, decode


class TorchvisionRecipe(JPEGFolderWorkload):
    name = "torchvision-recipe"

    def __init__(self, root: str | None = None, image_size: int = 224, n_images: int = 2000,
                 batch_size: int = 32, lr: float = 0.1, num_workers: int = 2,
                 weight_decay: float = 1e-4):
        super().__init__(root, image_size, n_images, batch_size, lr)
        self.weight_decay = weight_decay
        self.defaults = {"batch_size": batch_size, "num_workers": num_workers}
        self._crop = v2.RandomResizedCrop(image_size, antialias=True)

    def stages(self) -> list[Stage]:
        return [
            Stage("decode", decode, decode, ragged=True, host_input=True),
            Stage("crop_flip", self._crop_flip, self._crop_flip_batch, ragged=True),
            *super().stages()[2:],  # to_float, normalize
        ]

    def _crop_flip(self, image: torch.Tensor) -> torch.Tensor:
        """The recipe's training transform: a random crop of 8-100% of the area at a 3/4-4/3
        aspect, resized to image_size, then a flip half of the time."""
        image = self._crop(image)
        return F.horizontal_flip(image) if torch.rand(()) < 0.5 else image

    def _crop_flip_batch(self, images: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([self._crop_flip(image) for image in images])

    def optimizer(self, params, **impl):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9,
                               weight_decay=self.weight_decay, **impl)

    def cpu_sized(self) -> TorchvisionRecipe:
        return TorchvisionRecipe(self.root, 64, min(self.n_images, 512),
                                 self.defaults["batch_size"], self.lr,
                                 self.defaults["num_workers"], self.weight_decay)

    def describe(self) -> str:
        where = self.root or "random JPEGs in the cache"
        return (f"torchvision's classification recipe: resnet18 on a JPEG folder ({where}, "
                f"RandomResizedCrop {self.image_size} and flip), SGD lr {self.lr} momentum 0.9")
