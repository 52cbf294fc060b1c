"""A tiny decoder language model on variable-length token lists, built from its config
(nothing downloaded): the workload the token-counting tests (test_tokens.py) feed through each
real Hugging Face collator."""

from __future__ import annotations

import random
from typing import Any

import torch
from tokenizers import Tokenizer, models
from torch import nn
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorWithFlattening,
    DataCollatorWithPadding,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from autotune.core.workload import Workload

VOCAB = 256


def tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer with a pad token (its vocabulary: the ids themselves)."""
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")


def samples(n: int, shortest: int = 3, longest: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` token lists of random lengths: what a tokenized text dataset holds."""
    rng = random.Random(seed)
    return [{"input_ids": [rng.randrange(2, VOCAB) for _ in range(rng.randint(shortest, longest))]}
            for _ in range(n)]


def collator(kind: str) -> Any:
    """The real collators a Hugging Face user trains a causal LM with: ``pad`` (to the batch's
    longest), ``pad64`` (to a multiple of 64), ``lm`` (DataCollatorForLanguageModeling, labels
    included) and ``flatten`` (padding-free packing)."""
    if kind == "pad":
        return DataCollatorWithPadding(tokenizer())
    if kind == "pad64":
        return DataCollatorWithPadding(tokenizer(), pad_to_multiple_of=64)
    if kind == "lm":
        return DataCollatorForLanguageModeling(tokenizer(), mlm=False)
    if kind == "flatten":
        return DataCollatorWithFlattening()
    raise ValueError(f"collator {kind!r}: one of pad, pad64, lm, flatten")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, items: list[dict[str, Any]]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


class TinyLlamaLM(Workload):
    """LlamaForCausalLM from a 1-layer config on variable-length samples; the batch is a
    Mapping (labels inside), so the model computes its own loss."""

    name = "tiny-llama"
    static_shapes = False

    def __init__(self, n: int = 256, collate: str = "lm", batch_size: int = 4, seed: int = 0):
        self.n, self.collate, self.seed = n, collate, seed
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Tokens:
        return Tokens(samples(self.n, seed=self.seed))

    def collate_fn(self) -> Any:
        return collator(self.collate)

    def model(self) -> nn.Module:
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                             max_position_embeddings=128, pad_token_id=0)
        return LlamaForCausalLM(config)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-3, **impl)
