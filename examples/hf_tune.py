"""Tune a Hugging Face model's training speed with autotune, then train with what it found.

The model is built from its config (no download); ``tokens`` below stands for the user's
tokenized dataset (map-style, dicts with input_ids, attention_mask and labels). Tune, then
train with the exported TrainingArguments fields::

    autotune workload._target_=autotune.adapters.hf.HFWorkload \\
        +workload.model=transformers.GPT2LMHeadModel \\
        +workload.config=transformers.GPT2Config \\
        +workload.config_args='{n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 512, n_positions: 64, bos_token_id: 0, eos_token_id: 0}' \\
        +workload.dataset=examples.hf_tune.tokens \\
        +workload.training_args='{per_device_train_batch_size: 8}' \\
        study.name=hf-example
    python examples/hf_tune.py studies/hf-example/best.yaml

``studies/hf-example/training_args.yaml`` holds the same fields for reading or pasting.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

import autotune
from autotune.adapters.hf import training_arguments_kwargs

CONFIG = {"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 512, "n_positions": 64,
          "bos_token_id": 0, "eos_token_id": 0}


class Tokens(Dataset):
    """Random token sequences shaped like a tokenized causal-LM dataset."""

    def __init__(self, n: int, seq_len: int, vocab_size: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab_size, (n, seq_len), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def tokens(n: int = 1024, seq_len: int = 64, vocab_size: int = 512) -> Tokens:
    return Tokens(n, seq_len, vocab_size)


def train(best_yaml: str | Path, max_steps: int = 100, config: dict[str, Any] | None = None,
          output_dir: str | None = None) -> Any:
    """Train with the tuned configuration: TrainingArguments fields from best.yaml."""
    best = autotune.load_best(best_yaml)
    args = TrainingArguments(output_dir=output_dir or tempfile.mkdtemp(), max_steps=max_steps,
                             save_strategy="no", report_to="none", disable_tqdm=True,
                             **training_arguments_kwargs(best))
    config = config or CONFIG
    model = GPT2LMHeadModel(GPT2Config(**config))
    data = tokens(seq_len=config["n_positions"], vocab_size=config["vocab_size"])
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      data_collator=default_data_collator)
    return trainer.train()


if __name__ == "__main__":
    print(train(sys.argv[1] if len(sys.argv) > 1 else "studies/hf-example/best.yaml"))
