"""Tune a LightningModule and its DataModule, then fit with the result (CPU, ~1 minute).

The documentation's Lightning page shows this file as it is, and the test suite runs it
(tests/test_docs_examples.py).
"""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import autotune
from autotune.adapters import lightning as at_lightning


# --- your own code: a LightningModule and a LightningDataModule ---------------------------------
class Classifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class ImageData(L.LightningDataModule):
    def __init__(self, batch_size: int = 32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(1024, 3, 32, 32, generator=g),
                                       torch.randint(0, 10, (1024,), generator=g))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)


module, data = Classifier(), ImageData()

# --- autotune: tune, apply, fit -------------------------------------------------------------------
# Tiny settings so that this example runs in about a minute on a CPU; for a real study drop
# the window.* overrides and raise n_trials.
short = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
         "window.min_measure_steps=2", "window.min_measure_seconds=1",
         "window.profile=false", "study.confirm_budget_s=20"]
trainer_kwargs = {}
try:
    tuned = at_lightning.tune(module, data, overrides=short, device="cpu", n_trials=2,
                              name="lightning-docs")
    print("tuned:", tuned.best.document["speedup_text"])
    module, data = tuned.module, tuned.datamodule  # yours, with every measured setting applied
    trainer_kwargs = tuned.trainer_kwargs
except autotune.CouldNotMeasure as exc:  # a busy machine: the study says why; fit as you were
    print(exc)
L.Trainer(**trainer_kwargs, max_steps=10, accelerator="cpu", logger=False,
          enable_checkpointing=False).fit(module, data)
