"""Run under ``torchrun --nproc_per_node=2`` by tests/test_ddp_knobs.py: the trials' own DDP
step (core/training.py) with each DDP knob, on real gloo process groups. Rank 0 writes what
it saw as JSON to argv[1]: whether the ranks' gradients were already averaged after the first
micro-batch of an accumulation cycle, the gradients after the cycle, and what the wrapper got.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from autotune.core.env import probe
from autotune.core.quick_exit import quick_exit
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.measure import comm
from autotune.measure.clock import Clock
from autotune.workloads.mlp import MLPWorkload

CONFIGS = {
    "plain": {},
    "no_sync": {"accumulation_no_sync": True},
    "bf16_hook": {"comm_hook": "bf16"},
    "batched": {"batched_grad_copy": True, "gradient_as_bucket_view": True},
}


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()


def _same_on_all_ranks(vec: torch.Tensor) -> bool:
    rows = [torch.empty_like(vec) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, vec)
    return all(torch.equal(rows[0], r) for r in rows[1:])


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wl = MLPWorkload(n_samples=64, in_features=16, hidden=32, depth=1, batch_size=8)
    base = build_space(probe("cpu"), wl, {}).baseline
    report = {}
    for name, knobs in CONFIGS.items():
        run = Training(wl, {**base, **knobs}, "cpu", seed=0, grad_accum=2)
        torch.manual_seed(100 + rank)  # each rank its own micro-batches
        micro = [(torch.randn(8, 16), torch.randint(0, 10, (8,))) for _ in range(2)]
        run.forward_backward(*micro[0])
        run.optimizer_step()  # the cycle's first micro-batch: no optimizer step yet
        first = _same_on_all_ranks(_grads(run.model))
        run.forward_backward(*micro[1])
        after = _grads(run.model)  # before the optimizer steps on them
        report[name] = {
            "averaged_after_first_micro_batch": first,
            "averaged_after_cycle": _same_on_all_ranks(after),
            "grads": after.tolist(),
            "comm_hook": run.ddp._get_ddp_logging_data().get("comm_hook"),
            "batched_grad_copy": bool(getattr(run.ddp, "batched_grad_copy", False)),
            "gradient_as_bucket_view": bool(run.ddp.gradient_as_bucket_view),
        }
        if name in ("plain", "no_sync"):  # the window's counterfactual on this step
            batches = iter(micro * 100)
            timed = comm.exposed(run, batches, Clock(run.device), 10.0, 60.0, pairs=4)
            report[name]["counterfactual"] = {k: timed[k] for k in (
                "micro_steps_per_unit", "synced_step_ms", "unsynced_step_ms")}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    quick_exit(0)  # as verify's sides end: autotune/production/parity.py
