"""Test workloads whose batches are not (tensor, tensor) pairs: a Hugging Face-style dict batch
(the model is called with the mapping and returns an object with .loss), a nested structure
with a 4-D image inside, and a variable-shape one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.core.workload import Workload


class TokenDataset(Dataset):
    """Random token sequences as dicts: input_ids, attention_mask (a padded tail) and labels,
    as a tokenizer plus a language-modelling collator would give them."""

    def __init__(self, n: int, seq_len: int, vocab: int):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)
        self.pad = torch.randint(0, seq_len // 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        mask = torch.ones_like(self.ids[i])
        if self.pad[i]:
            mask[-int(self.pad[i]):] = 0
        return {"input_ids": self.ids[i], "attention_mask": mask, "labels": self.ids[i]}


@dataclass
class LMOutput:
    """What a Hugging Face causal LM returns: the loss it computed and the logits."""

    loss: torch.Tensor
    logits: torch.Tensor


class TinyLM(nn.Module):
    """A one-layer transformer taking keyword inputs, the Hugging Face calling convention."""

    def __init__(self, vocab: int, d_model: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.block = nn.TransformerEncoderLayer(d_model, 2, 2 * d_model, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                labels: torch.Tensor | None = None) -> LMOutput:
        h = self.block(self.embed(input_ids), src_key_padding_mask=attention_mask == 0)
        logits = self.head(h)
        loss = nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
            reduction="none")
        keep = attention_mask[:, 1:].reshape(-1).to(loss.dtype)
        return LMOutput(loss=(loss * keep).sum() / keep.sum().clamp(min=1), logits=logits)


class DictBatchLM(Workload):
    """Batches are dicts; no loss() and no split_batch(): the defaults must do."""

    name = "dict-lm"

    def __init__(self, n: int = 64, seq_len: int = 16, vocab: int = 64, d_model: int = 32,
                 batch_size: int = 8):
        self.n, self.seq_len, self.vocab, self.d_model = n, seq_len, vocab, d_model
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return TokenDataset(self.n, self.seq_len, self.vocab)

    def model(self) -> nn.Module:
        return TinyLM(self.vocab, self.d_model)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-3, **impl)


class NestedDataset(Dataset):
    """Samples of ({"image": (3, 8, 8), "meta": [(4,), "tag"]}, (label, weight))."""

    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.m = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        return ({"image": self.x[i], "meta": [self.m[i], "tag"]}, (self.y[i], torch.tensor(1.0)))


class NestedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8 + 4, 3)
        self.seen_channels_last = False

    def forward(self, image: torch.Tensor, meta: list[Any]) -> torch.Tensor:
        meta, tag = meta
        assert list(tag) == ["tag"] * image.size(0), tag  # a non-tensor leaf, untouched
        self.seen_channels_last = image.is_contiguous(memory_format=torch.channels_last)
        return self.fc(torch.cat([self.conv(image).flatten(1), meta], dim=1))


class NestedWorkload(Workload):
    """inputs a dict holding a 4-D image and a list; targets a (labels, weights) pair."""

    name = "nested"
    image_inputs = True

    def __init__(self, n: int = 32, batch_size: int = 4):
        self.n = n
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return NestedDataset(self.n)

    def model(self) -> nn.Module:
        return NestedNet()

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        labels, weights = targets
        return (nn.functional.cross_entropy(outputs, labels, reduction="none") * weights).mean()

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.01, **impl)


class VariableShapeLM(DictBatchLM):
    """Sequences padded to each batch's longest: shapes change from batch to batch."""

    name = "variable-lm"
    static_shapes = False
