"""Tune a Hugging Face Trainer you already hold, from Python, then train with the result.

Everything above the ``autotune`` block is the user's own code: a small BERT-style classifier
built from its config (nothing is downloaded), a tokenizer built locally from a word list,
sentences of varying length, and ``DataCollatorWithPadding`` (so each batch has its own
length). The autotune block is four lines::

    python examples/hf_trainer_tune.py [--trials 8] [--device cpu]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

WORDS = ("the a this that movie film story plot actor scene was is felt seemed very quite "
         "really not good great fine bad poor dull fun slow fast long short").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer (a word-level model from the tokenizers library), built locally."""
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]")


class Reviews(torch.utils.data.Dataset):
    """Sentences of 4 to 60 words, tokenized once; label: more "good" words than "bad" ones."""

    def __init__(self, tok: PreTrainedTokenizerFast, n: int = 2048, seed: int = 0):
        rng = random.Random(seed)
        self.items: list[dict[str, Any]] = []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 60))]
            enc = tok(" ".join(words), truncation=True, max_length=64)
            label = int(sum(w in ("good", "great", "fun") for w in words)
                        > sum(w in ("bad", "poor", "dull") for w in words))
            self.items.append({**enc, "labels": label})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def users_trainer(output_dir: str, device: str = "cpu") -> Trainer:
    """The user's Trainer as they built it before tuning."""
    tok = tokenizer()
    config = BertConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,
                        max_position_embeddings=64, num_labels=2)
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=8,
                             num_train_epochs=1, logging_steps=10, report_to="none",
                             save_strategy="no", use_cpu=device == "cpu")
    return Trainer(model=BertForSequenceClassification(config), args=args,
                   train_dataset=Reviews(tok), data_collator=DataCollatorWithPadding(tok))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--name", default="hf-trainer-example")
    ap.add_argument("--train-steps", type=int, default=50)
    a = ap.parse_args()
    trainer = users_trainer(tempfile.mkdtemp(), a.device)

    # --- autotune -----------------------------------------------------------------------
    from autotune.adapters import hf

    tuned = hf.tune(trainer, device=a.device, n_trials=a.trials, name=a.name)
    print("tuned:", {k: getattr(tuned.training_args, k) for k in
                     ("per_device_train_batch_size", "dataloader_num_workers", "bf16", "optim")})
    tuned.apply(trainer).args.max_steps = a.train_steps  # a short run for the example
    trainer.train()


if __name__ == "__main__":
    main()
