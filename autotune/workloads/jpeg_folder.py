"""ResNet-18 on a folder of JPEG files (ImageFolder layout: one sub-folder per class).

The input pipeline is declared in stages, decoding included, so ``transform_split`` can ship
the encoded bytes and decode on the device: ``torchvision.io.decode_jpeg`` takes a list of
CPU byte tensors and, given a CUDA device, decodes them there with nvJPEG (on the CPU it
decodes on the CPU, in the training process, after the loader). Stages:

0 decode     bytes -> uint8 CHW image (each its own size: a batch of them is a list)
1 resize     resize the shorter side to ``image_size`` and center-crop to a square
2 to_float   uint8 -> float32 in [0, 1]
3 normalize  ImageNet mean/std

Without ``root`` (tests, CPU runs) it writes ``n_images`` random JPEGs of varied sizes into a
cache folder once (nothing is downloaded) and reads them from there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision
import torchvision.transforms.v2.functional as F
from PIL import Image
from torch.utils.data import Dataset
from torchvision.datasets import ImageFolder
from torchvision.io import ImageReadMode

from autotune.core.stages import Stage
from autotune.core.workload import Workload
from autotune.workloads.resnet18 import ResNet18Step

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def decode(data: torch.Tensor | list[torch.Tensor], device: Any = "cpu") -> Any:
    """torchvision's JPEG decoder (one image, or a list of them on ``device``). torchvision
    0.29 marks its image codecs deprecated in favour of TorchCodec, which is not a dependency
    here: the warning is silenced, not the behaviour."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB, device=device)


def read_bytes(path: str) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (the ImageFolder loader: no decoding here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torchvision.io.read_file(path)


def write_random_jpegs(root: Path, n_images: int, classes: int = 10, seed: int = 0) -> None:
    """``n_images`` smooth random images (low-resolution noise upsampled, as photos compress)
    of 48..96 px sides, JPEG quality 90, in ``root/class_<k>/``. Written to a temporary
    sibling and renamed, so concurrent trials never read a half-written folder."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    for k in range(classes):
        (tmp / f"class_{k}").mkdir()
    for i in range(n_images):
        h, w = (int(v) for v in rng.integers(48, 97, size=2))
        coarse = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize((w, h), Image.Resampling.BILINEAR)
        image.save(tmp / f"class_{i % classes}" / f"{i:06d}.jpg", quality=90)
    try:
        os.rename(tmp, root)
    except OSError:  # another process finished first: use its folder
        shutil.rmtree(tmp, ignore_errors=True)


def is_jpeg(path: str) -> bool:
    return path.lower().endswith((".jpg", ".jpeg"))


def cache_root(n_images: int) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune"
    return base / f"random-jpegs-{n_images}"


class JPEGFolderWorkload(ResNet18Step, Workload):
    name = "jpeg"
    image_inputs = True
    # The model always sees image_size squares. (A split that decodes or resizes on the device
    # hands it lists of varying shapes: with cuda_graphs such a trial ends capture_failed.)
    static_shapes = True

    def __init__(self, root: str | None = None, image_size: int = 224, n_images: int = 2000,
                 batch_size: int = 32, lr: float = 0.001):
        self.root, self.image_size, self.n_images, self.lr = root, image_size, n_images, lr
        # A new user's loop: ImageFolder decoding on the host, in the training process.
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def folder(self) -> Path:
        if self.root:
            return Path(self.root).expanduser()
        root = cache_root(self.n_images)
        if not root.is_dir():
            root.parent.mkdir(parents=True, exist_ok=True)
            write_random_jpegs(root, self.n_images)
        return root

    def raw_dataset(self) -> Dataset:
        """ImageFolder yielding each file's encoded bytes (a 1-D uint8 tensor) and its class."""
        folder = self.folder()
        try:
            return ImageFolder(str(folder), loader=read_bytes,
                               is_valid_file=is_jpeg)
        except (FileNotFoundError, OSError) as exc:
            raise ValueError(
                f"workload.root={str(folder)!r}: {exc}. Expected an ImageFolder layout: one "
                "sub-folder per class holding .jpg/.jpeg files (or no root: random JPEGs are "
                "written to a cache folder)."
            ) from exc

    def stages(self) -> list[Stage]:
        return [
            Stage("decode", decode, decode, ragged=True, host_input=True),
            Stage("resize", self._resize_crop, self._resize_crop_batch, ragged=True),
            Stage("to_float", _to_float, _to_float),
            Stage("normalize", _normalize, _normalize),
        ]

    def _resize_crop(self, image: torch.Tensor) -> torch.Tensor:
        """Shorter side to image_size, then the center square (ImageNet's eval transform)."""
        image = F.resize(image, [self.image_size], antialias=True)
        return F.center_crop(image, [self.image_size, self.image_size])

    def _resize_crop_batch(self, images: list[torch.Tensor]) -> torch.Tensor:
        """Each image has its own size, so each is resized on its own (on the device, where
        it already is), then the batch is stacked."""
        return torch.stack([self._resize_crop(image) for image in images])

    def cpu_sized(self) -> JPEGFolderWorkload:
        return JPEGFolderWorkload(self.root, 64, min(self.n_images, 512),
                                  self.defaults["batch_size"], self.lr)

    def describe(self) -> str:
        where = self.root or "random JPEGs in the cache"
        return (f"resnet18 on a JPEG folder ({where}, image_size={self.image_size}; input "
                "stages: decode, resize, to_float, normalize)")


def _to_float(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32) / 255.0


def _normalize(x: torch.Tensor) -> torch.Tensor:
    """ImageNet mean/std over the channel axis: -3 is C in a CHW sample and an NCHW batch."""
    mean = torch.tensor(MEAN, device=x.device).view(3, 1, 1)
    std = torch.tensor(STD, device=x.device).view(3, 1, 1)
    return (x - mean) / std
