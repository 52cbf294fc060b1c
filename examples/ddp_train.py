"""A plain DDP training script, launched by torchrun, that trains with a study's best
configuration.

    autotune workload=mlp device=cpu launch.nproc_per_node=2   # studies/mlp-cpu-2ranks/best.yaml
    # best.yaml's launch.torchrun, with this script in place of your_train.py:
    OMP_NUM_THREADS=1 torchrun --standalone --nnodes=1 --nproc_per_node=2 \\
        examples/ddp_train.py studies/mlp-cpu-2ranks/best.yaml --steps 100
    # the realized speedup, both sides as 2 ranks, interleaved:
    autotune verify studies/mlp-cpu-2ranks --nproc-per-node 2 --script examples/ddp_train.py \\
        studies/mlp-cpu-2ranks/best.yaml --steps 100

Ordinary PyTorch DDP: its own dataset (``--latency-ms`` makes each sample a slow read, as
from a network file system), model, optimizer and loss, the same shapes as autotune's mlp
workload. ``autotune.Runtime`` pins the rank to its share of the node's cores and applies the
measured threads; ``rt.dataloader`` gives each rank its DistributedSampler and the measured
workers; ``rt.ddp`` wraps the model with the measured DDP arguments.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

import autotune
from autotune.workloads.mlp import MLPWorkload


class SlowReads(Dataset):
    """Random features and labels, each sample read with ``latency_s`` of waiting."""

    def __init__(self, n: int, latency_s: float):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g)
        self.latency_s = latency_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.x[i], self.y[i]


class SlowReadsWorkload(MLPWorkload):
    """This script's data and model as an autotune workload, so a study measures what the
    script runs: ``workload._target_=examples.ddp_train.SlowReadsWorkload
    +workload.latency_ms=2`` (docs/benchmarks.md, "The shared-cores case")."""

    name = "slow-reads-mlp"

    def __init__(self, latency_ms: float = 0.0, n_samples: int = 8192, **kw: object):
        super().__init__(n_samples=n_samples, **kw)  # type: ignore[arg-type]
        self.latency_ms = latency_ms

    def dataset(self, transfer_dtype: str) -> Dataset:
        return SlowReads(self.n_samples, self.latency_ms / 1e3)

    def describe(self) -> str:
        return f"slow-reads-mlp latency_ms={self.latency_ms} ({self.n_samples} samples)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("best", help="path to a study's best.yaml")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()

    rt = autotune.Runtime(args.best)  # pins this rank to its cores, sets its threads
    dist.init_process_group("nccl" if rt.device.type == "cuda" else "gloo")
    loader = rt.dataloader(SlowReads(8192, args.latency_ms / 1e3))
    model = rt.ddp(rt.model(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128),
                                          nn.ReLU(), nn.Linear(128, 10))))
    optimizer = rt.optimizer(torch.optim.SGD, model.parameters(), lr=0.01, momentum=0.9)
    run = rt.wrap(model, optimizer, nn.functional.cross_entropy, loader=loader)
    meter = rt.meter()  # the whole run's samples/s against the study's (autotune verify reads it)

    step, samples, start = 0, 0, None
    while step < args.steps:
        for inputs, targets in meter.wrap(loader):
            loss = run.step(*run.to_device(inputs, targets))
            meter.step(len(targets))
            step += 1
            if step == 5:  # warm-up excluded
                dist.barrier()
                start = time.perf_counter()
            elif step > 5:
                samples += len(targets) * dist.get_world_size()
            if step == args.steps:
                break
    dist.barrier()
    if dist.get_rank() == 0 and start is not None:
        rate = samples / (time.perf_counter() - start)
        print(f"rank 0 of {dist.get_world_size()}: loss {loss.item():.4f}, "
              f"{rate:.1f} samples/s (all ranks), cores {sorted(os.sched_getaffinity(0))}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
