"""A small decoder language model fine-tuned with a Hugging Face Trainer on samples of varying
length: the transformer knobs (attention, activation checkpointing, length grouping,
padding-free packing) measured in tokens/s.

Everything is built locally (nothing is downloaded): a Llama-style model from its config, a
word-level tokenizer, texts of 8 to ``max_len`` tokens, and a collator that pads each batch to
its longest sample (labels -100 on the padding): transformers' language-modelling collator, or
with ``--collator function`` a plain ``collate(features)`` function of the user's, as many
training scripts write one (autotune reads the padding from the batches, not the collator)::

    python examples/hf_lm.py [--trials 8] [--group] [--pack] [--collator function]
                             [--device cuda] [--set KEY=VALUE ...] [--no-train]

``--group`` / ``--pack`` let the study search length grouping / padding-free packing (they
change which samples share a batch, or its layout, so they are the user's call).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorForLanguageModeling,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

WORDS = [f"w{i}" for i in range(500)]
SPECIAL = ["[PAD]", "[UNK]", "[BOS]"]


def tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer (word level, built locally)."""
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   bos_token="[BOS]")


class Texts(torch.utils.data.Dataset):
    """Texts of ``min_len`` to ``max_len`` tokens (most short, a few long: lengths drawn from
    a skewed distribution, as real corpora are), tokenized once."""

    def __init__(self, tok: PreTrainedTokenizerFast, n: int = 512, min_len: int = 8,
                 max_len: int = 256, seed: int = 0):
        rng = random.Random(seed)
        self.items: list[dict[str, Any]] = []
        for _ in range(n):
            length = min(max_len, int(min_len + rng.expovariate(1.0) * (max_len - min_len) / 4))
            words = " ".join(rng.choice(WORDS) for _ in range(length))
            self.items.append(dict(tok(words, truncation=True, max_length=max_len)))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def model_config(tok: PreTrainedTokenizerFast, layers: int = 2, hidden: int = 128,
                 max_len: int = 256, **kw: Any) -> LlamaConfig:
    return LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                       max_position_embeddings=max_len, pad_token_id=tok.pad_token_id, **kw)


def pad_collate(features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A plain collate function that pads each batch to its longest sample: ids padded with
    the pad token (0), the attention mask 0 on the padding, labels -100 there."""
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, f in enumerate(features):
        ids[row, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[row, :len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def users_trainer(output_dir: str, n: int = 512, max_len: int = 256, batch_size: int = 8,
                  min_len: int = 8, collator: str = "lm", device: str = "cpu",
                  **model_kw: Any) -> Trainer:
    """The user's Trainer as built before tuning; ``collator``: ``lm`` (transformers'
    DataCollatorForLanguageModeling) or ``function`` (``pad_collate``)."""
    tok = tokenizer()
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=batch_size,
                             num_train_epochs=1, logging_steps=10, report_to="none",
                             save_strategy="no", use_cpu=device == "cpu")
    model = LlamaForCausalLM(model_config(tok, max_len=max_len, **model_kw))
    return Trainer(model=model, args=args, train_dataset=Texts(tok, n=n, min_len=min_len, max_len=max_len),
                   data_collator=pad_collate if collator == "function" else
                   DataCollatorForLanguageModeling(tok, mlm=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--name", default="hf-lm-example")
    ap.add_argument("--group", action="store_true", help="search length grouping")
    ap.add_argument("--pack", action="store_true", help="search padding-free packing")
    ap.add_argument("--collator", choices=["lm", "function"], default="lm",
                    help="transformers' LM collator, or the plain function pad_collate")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a further autotune override (window.measure_seconds=3, ...)")
    ap.add_argument("--no-train", action="store_true",
                    help="tune only: do not train the Trainer with the result afterwards")
    a = ap.parse_args()
    from autotune.adapters import hf

    trainer = users_trainer(tempfile.mkdtemp(), collator=a.collator, device=a.device)
    overrides = [f"study.n_trials={a.trials}", f"study.name={a.name}", *a.set]
    if a.group:
        overrides.append("knobs.length_grouping=[false,true]")
    if a.pack:
        overrides.append("knobs.padding_free=[false,true]")
    tuned = hf.tune(trainer, overrides=overrides, device=a.device)
    print(tuned.training_args)
    if not a.no_train:
        tuned.apply(trainer).train()


if __name__ == "__main__":
    main()
