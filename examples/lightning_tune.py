"""Tune a LightningModule's training speed with autotune, then train with what it found.

The user's code is ``Classifier`` and ``RandomData`` below (any LightningModule and
LightningDataModule work the same way). Tune, then train with the exported arguments::

    autotune workload._target_=autotune.adapters.lightning.LightningWorkload \\
        +workload.module=examples.lightning_tune.Classifier \\
        +workload.module_args='{hidden: 256}' \\
        +workload.datamodule=examples.lightning_tune.RandomData \\
        study.name=lightning-example
    python examples/lightning_tune.py studies/lightning-example/best.yaml

``studies/lightning-example/lightning.yaml`` holds the same arguments for reading or pasting.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import autotune
from autotune.adapters.lightning import dataloader_kwargs, prepare_module, trainer_kwargs


class Classifier(L.LightningModule):
    def __init__(self, features: int = 32, hidden: int = 64, classes: int = 10, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 10)}


class RandomData(L.LightningDataModule):
    def __init__(self, n: int = 2048, features: int = 32, classes: int = 10,
                 batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.n, self.features, self.classes = n, features, classes
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(self.n, self.features, generator=g),
                                       torch.randint(0, self.classes, (self.n,), generator=g))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.num_workers)


def train(best_yaml: str | Path, max_steps: int = -1, **module_args: Any) -> L.Trainer:
    """Train with the tuned configuration: Trainer and DataLoader arguments from best.yaml."""
    best = autotune.load_best(best_yaml)
    module = prepare_module(Classifier(**module_args), best)   # compile, channels_last, TF32
    data = RandomData()
    data.setup("fit")
    loader = DataLoader(data.train_set, shuffle=True, **dataloader_kwargs(best))
    trainer = L.Trainer(**trainer_kwargs(best), accelerator=best.document["device"]["type"],
                        max_epochs=1, max_steps=max_steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, train_dataloaders=loader)
    return trainer


if __name__ == "__main__":
    train(sys.argv[1] if len(sys.argv) > 1 else "studies/lightning-example/best.yaml")
