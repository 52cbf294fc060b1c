"""Models for the global-batch tests (tests/test_global_batch.py): a tiny Llama built from its
config and a LightningModule, each sleeping a fixed time per forward call (per micro-batch), so
a larger micro-batch is faster per sample whatever else the machine runs: the fastest
configuration takes the largest micro-batch (a global batch of its own), the fastest that keeps
the user's global batch the largest micro-batch that divides it. Two answers known in advance.
Imports transformers and Lightning: the tests that use it skip without them first."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import LlamaConfig, LlamaForCausalLM

LLAMA = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 128,
         "max_position_embeddings": 64}


class SleepyLlama(LlamaForCausalLM):
    """A ``LlamaForCausalLM`` whose forward sleeps ``sleep_s`` first."""

    sleep_s = 0.0

    def forward(self, input_ids: Any = None, attention_mask: Any = None, labels: Any = None,
                **kwargs: Any) -> Any:
        # The columns named: the Trainer keeps the dataset's columns its forward names.
        time.sleep(self.sleep_s)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                               labels=labels, **kwargs)


def sleepy_llama(sleep_ms: float = 20.0) -> SleepyLlama:
    """A small Llama from its config (random weights, nothing downloaded)."""
    model = SleepyLlama(LlamaConfig(**LLAMA))
    model.sleep_s = sleep_ms / 1e3
    return model


class SleepyClassifier(pl.LightningModule):
    """A small classifier whose training_step sleeps ``sleep_ms`` first; AdamW."""

    def __init__(self, sleep_ms: float = 20.0):
        super().__init__()
        self.sleep_s = sleep_ms / 1e3
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class SmallData(pl.LightningDataModule):
    def __init__(self, n: int = 512, batch_size: int = 4):
        super().__init__()
        self.n, self.batch_size = n, batch_size

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(self.n, 16, generator=g),
                                       torch.randint(0, 4, (self.n,), generator=g))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)
