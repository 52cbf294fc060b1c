"""A small decoder-only transformer language model on random token ids (AdamW)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.core.tokens import every_id_real
from autotune.core.workload import Workload


class RandomTokens(Dataset):
    def __init__(self, n_sequences: int, seq_len: int, vocab: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (n_sequences, seq_len + 1), generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[i]
        return row[:-1], row[1:]


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d_model: int, n_layer: int, n_head: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_head) for _ in range(n_layer)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


class GPTWorkload(Workload):
    name = "gpt"
    static_shapes = True
    attention_choices = ("sdpa",)  # Block calls scaled_dot_product_attention: its backend is a knob
    checkpoint_layers = (Block,)
    shard_layers = (Block,)

    def __init__(self, vocab: int = 8192, seq_len: int = 256, d_model: int = 384,
                 n_layer: int = 6, n_head: int = 6, n_sequences: int = 4096,
                 batch_size: int = 16, lr: float = 3e-4):
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} must be divisible by n_head={n_head}")
        self.vocab, self.seq_len, self.d_model = vocab, seq_len, d_model
        self.n_layer, self.n_head, self.n_sequences, self.lr = n_layer, n_head, n_sequences, lr
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def tokens(self, inputs: Any) -> tuple[int, int]:
        """Every id is a real token: fixed-length windows of a token stream, never padded."""
        return every_id_real(inputs)

    def dataset(self, transfer_dtype: str) -> Dataset:
        return RandomTokens(self.n_sequences, self.seq_len, self.vocab)

    def model(self) -> nn.Module:
        return GPT(self.vocab, self.seq_len, self.d_model, self.n_layer, self.n_head)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs.flatten(0, 1).float(), targets.flatten())

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self.lr, weight_decay=0.1, **impl)

    def cpu_sized(self) -> GPTWorkload:
        return GPTWorkload(vocab=2048, seq_len=64, d_model=128, n_layer=2, n_head=4,
                           n_sequences=1024, batch_size=self.defaults["batch_size"], lr=self.lr)

    def describe(self) -> str:
        return (f"gpt (vocab={self.vocab}, seq_len={self.seq_len}, d_model={self.d_model}, "
                f"n_layer={self.n_layer}, n_head={self.n_head})")
