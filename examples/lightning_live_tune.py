"""Tune a LightningModule and its DataModule from Python, then fit with the result.

Everything above the ``autotune`` block is the user's own code, written as Lightning's docs
write it: a small image classifier that logs with ``self.log`` and returns an AdamW with a
per-step LR scheduler (the dict form), and a DataModule whose samples are read with a little
latency and augmented on the CPU (random resized crop, flip). The autotune block is four lines::

    python examples/lightning_live_tune.py [--trials 8]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import lightning as L
import torch
import torchvision.transforms.v2 as v2
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """uint8 CHW images read with ``read_ms`` of latency each, augmented per sample."""

    def __init__(self, n: int = 2048, size: int = 48, read_ms: float = 2.0):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.read_ms = read_ms
        self.augment = v2.Compose([v2.RandomResizedCrop(32, antialias=True),
                                   v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                                   v2.Normalize([0.5] * 3, [0.25] * 3)])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.read_ms / 1e3)  # storage latency
        return self.augment(self.images[i]), self.labels[i]


class ImageData(L.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int = 0, read_ms: float = 2.0):
        super().__init__()
        self.batch_size, self.num_workers, self.read_ms = batch_size, num_workers, read_ms

    def setup(self, stage: str) -> None:
        self.train_set = Images(read_ms=self.read_ms)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.num_workers)


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", (logits.argmax(1) == y).float().mean())
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr, total_steps=10_000)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--name", default="lightning-live-example")
    ap.add_argument("--fit-steps", type=int, default=50)
    a = ap.parse_args()
    module, data = Classifier(), ImageData()

    # --- autotune -----------------------------------------------------------------------
    from autotune.adapters import lightning as at_lightning

    tuned = at_lightning.tune(module, data, device="cpu", n_trials=a.trials, name=a.name)
    module, data = tuned.apply(module, data)
    L.Trainer(**tuned.trainer_kwargs, max_steps=a.fit_steps, accelerator="cpu").fit(module, data)


if __name__ == "__main__":
    main()
