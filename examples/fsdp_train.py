"""A plain FSDP2 training script, launched by torchrun, that trains a Llama-style causal LM
(built from a ``transformers`` config, nothing downloaded) with a study's best configuration.

    # the study: 2 ranks, sharding searched (DDP, full_shard, shard_grad_op), 1.7 GB per rank
    PYTHONPATH=. autotune workload._target_=examples.fsdp_train.LlamaWorkload device=cpu \\
        launch.nproc_per_node=2 memory.limit_gb=1.7 study.name=llama
    # best.yaml's launch.torchrun, with this script in place of your_train.py:
    OMP_NUM_THREADS=1 torchrun --standalone --nnodes=1 --nproc_per_node=2 \\
        examples/fsdp_train.py studies/llama/best.yaml --steps 30
    # the realized speedup, both sides as 2 ranks, interleaved:
    autotune verify studies/llama --nproc-per-node 2 --script examples/fsdp_train.py \\
        studies/llama/best.yaml --steps 30

Ordinary PyTorch: random token ids, ``LlamaForCausalLM`` with its own loss, AdamW.
``autotune.Runtime`` pins the rank to its share of the node's cores and applies the measured
process knobs (threads, the host allocator); ``rt.dataloader`` gives each rank its
DistributedSampler; ``rt.parallel`` shards the model as measured (``fully_shard`` on each
decoder layer, then the root, with the measured reshard, mixed precision and prefetch; or
DDP where the study measured that faster), before the optimizer is built on its shards.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

import autotune
from autotune.core.workload import Workload


class Tokens(Dataset):
    """Fixed-length windows of random token ids, as a causal LM's batch: ids and labels."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def llama(vocab: int, hidden: int, layers: int, intermediate: int, heads: int,
          seq_len: int) -> torch.nn.Module:
    """A Llama-style decoder from its config (random weights, the config's initialization)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=seq_len, use_cache=False))


class LlamaWorkload(Workload):
    """This script's data and model as an autotune workload, so a study measures what the
    script runs. The default is about 67M parameters (AdamW: 16 bytes a parameter with its
    gradient and two moments, about 1.1 GB a DDP rank holds before activations); a model
    whose blocks are found by its ``_no_split_modules`` (LlamaDecoderLayer)."""

    name = "llama"
    checkpointable = True  # the model's own gradient-checkpointing switch

    def __init__(self, vocab: int = 32000, hidden: int = 512, layers: int = 10,
                 intermediate: int = 1536, heads: int = 8, seq_len: int = 128,
                 n_sequences: int = 512, batch_size: int = 4, lr: float = 3e-4):
        self.args = {"vocab": vocab, "hidden": hidden, "layers": layers,
                     "intermediate": intermediate, "heads": heads, "seq_len": seq_len}
        self.n_sequences, self.lr = n_sequences, lr
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def tokens(self, inputs: Any) -> None:
        """Samples/s, not tokens/s: every sample is seq_len real tokens (tokens/s is samples/s
        times seq_len), and ``autotune verify --script`` compares a script's Meter, which
        counts samples."""
        return None

    def dataset(self, transfer_dtype: str) -> Dataset:
        return Tokens(self.n_sequences, self.args["seq_len"], self.args["vocab"])

    def model(self) -> torch.nn.Module:
        return llama(**self.args)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self.lr, **impl)

    def describe(self) -> str:
        a = self.args
        return (f"llama (vocab={a['vocab']}, hidden={a['hidden']}, layers={a['layers']}, "
                f"seq_len={a['seq_len']}, AdamW)")


def _wrapper(model: torch.nn.Module) -> str:
    """What the model runs as: "FSDP2" (fully_shard), "DDP", or "one process"."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, FSDPModule):
        return "FSDP2"
    return "DDP" if isinstance(model, DistributedDataParallel) else "one process"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("best", help="path to a study's best.yaml")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--size", default="", help="the workload's sizes as k=v,k=v (the "
                        "study's workload arguments), e.g. layers=2,hidden=64,vocab=512")
    args = parser.parse_args()
    sizes = {k: int(v) for k, v in (p.split("=") for p in args.size.split(",") if p)}
    wl = LlamaWorkload(**sizes)

    rt = autotune.Runtime(args.best)  # pins this rank to its cores, sets its threads, malloc
    dist.init_process_group("nccl" if rt.device.type == "cuda" else "gloo")
    loader = rt.dataloader(wl.dataset("float32"))
    torch.manual_seed(0)
    model = rt.parallel(rt.model(wl.model()))  # FSDP2 (or DDP) as measured, before AdamW
    optimizer = rt.optimizer(torch.optim.AdamW, model.parameters(), lr=wl.lr)
    run = rt.wrap(model, optimizer, loader=loader)  # the model's own loss (labels inside)
    # The run's samples/s after the same 3 warm-up steps as below, against the study's (autotune
    # verify reads it): one window of every measured step, so a short run reports too.
    meter = rt.meter(warmup_steps=3, window_steps=max(1, args.steps - 3))

    step, tokens, start = 0, 0, None
    while step < args.steps:
        for batch in meter.wrap(loader):
            loss = run.step(*run.to_device(*run.split(batch)))
            meter.step(len(batch["input_ids"]))
            step += 1
            if step == 3:  # warm-up excluded
                dist.barrier()
                start = time.perf_counter()
            elif step > 3:
                tokens += batch["input_ids"].numel() * dist.get_world_size()
            if step == args.steps:
                break
    dist.barrier()
    if dist.get_rank() == 0 and start is not None:
        rate = tokens / (time.perf_counter() - start)
        print(f"rank 0 of {dist.get_world_size()}: {rt.knobs.get('sharding')} "
              f"({_wrapper(model)}), loss "
              f"{loss.item():.4f}, {rate:.1f} tokens/s (all ranks), cores "
              f"{sorted(os.sched_getaffinity(0))}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
