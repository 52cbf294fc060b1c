"""Run under ``torchrun --nproc_per_node=N`` (one rank per GPU, N = 1 or 2) on a CUDA machine
by tests/test_sharding_gpu.py: the sharded path's CUDA code (NCCL, a CUDA device mesh): the
trials' own Training with FSDP2 and each CUDA-side sharding knob, a few steps, the
communication counterfactual and the collectives' profile. Rank 0 writes what it saw to
argv[1]."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

from autotune.core.env import probe
from autotune.core.quick_exit import quick_exit
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.measure import comm
from autotune.measure.clock import Clock
from autotune.workloads.gpt import GPTWorkload

CONFIGS: dict[str, dict[str, Any]] = {
    "full_shard": {"sharding": "full_shard"},
    "shard_grad_op_bf16": {"sharding": "shard_grad_op", "fsdp_param_dtype": "bf16",
                           "fsdp_prefetch": 1},
    "offload": {"sharding": "full_shard", "fsdp_cpu_offload": True},
}


def main(out: str) -> None:
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    wl = GPTWorkload(vocab=256, seq_len=64, d_model=64, n_layer=2, n_head=2, n_sequences=64,
                     batch_size=8)
    base = build_space(probe("cuda"), wl, {}).baseline
    report: dict[str, Any] = {"backend": dist.get_backend(), "world": dist.get_world_size()}
    for name, knobs in CONFIGS.items():
        run = Training(wl, {**base, **knobs}, f"cuda:{local}", seed=0)
        batches = iter(run.loader)
        losses = [float(run.step(*run.to_device(*run.split(next(batches)))).item())
                  for _ in range(3)]
        seen: dict[str, Any] = {"losses": losses, "sharded": run.fsdp is not None,
                                "mesh": str(run.model.parameters().__next__().device_mesh)}
        if name != "offload":
            cf = comm.exposed(run, batches, Clock(run.device), 10.0, 30.0, pairs=4)
            seen["counterfactual"] = {k: cf.get(k) for k in (
                "synced_step_ms", "unsynced_step_ms", "all_gathers", "all_gather_ms",
                "reduce_scatters", "reduce_scatter_ms", "collectives_source",
                "collectives_error")}
        seen["peak_gb"] = torch.cuda.max_memory_reserved() / 2**30
        report[name] = seen
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    quick_exit(0)
