"""Run under ``torchrun --nproc_per_node=2`` by tests/test_sharding.py: the trials' own step
(core/training.py) with each sharding knob, on real gloo process groups and FSDP2. Rank 0
writes what it saw as JSON to argv[1]: the groups FSDP2 made, whether a block's parameters
were resharded after its forward, the dtypes and prefetch each group got, whether gradients
were reduced after an accumulation cycle's first micro-batch, the whole gradients after the
cycle (gathered from the shards), and the same after the communication counterfactual.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from autotune.core.env import probe
from autotune.core.quick_exit import quick_exit
from autotune.core.sharding import fsdp_modules
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.measure import comm
from autotune.measure.clock import Clock
from autotune.workloads.gpt import GPTWorkload

FULL = {"sharding": "full_shard"}
CONFIGS: dict[str, dict[str, Any]] = {
    "ddp": {},
    "full_shard": FULL,
    "shard_grad_op": {"sharding": "shard_grad_op"},
    "every_2": {**FULL, "fsdp_wrap_blocks": 2},
    "bf16_params": {**FULL, "fsdp_param_dtype": "bf16"},
    "bf16_reduce": {**FULL, "fsdp_reduce_dtype": "bf16"},
    "prefetch_2": {**FULL, "fsdp_prefetch": 2},
    "ddp_accumulating": {},
    "accumulating": FULL,
    "no_sync": {**FULL, "accumulation_no_sync": True},
}


def _grads(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter's whole gradient (a shard's gathered from the ranks)."""
    out = []
    for p in model.parameters():
        g = p.grad
        out.append((g.full_tensor() if isinstance(g, DTensor) else g).reshape(-1).float())
    return torch.cat(out).clone()


def _blocks_state(run: Training) -> dict[str, Any]:
    block = run.model.blocks[0]
    state = fully_shard.state(block)  # type: ignore[attr-defined]
    group = state._fsdp_param_groups[0]
    return {"groups": len({id(fully_shard.state(m)) for m in fsdp_modules(run.model)}),  # type: ignore[attr-defined]
            "param_dtype": str(group.mp_policy.param_dtype),
            "reduce_dtype": str(group.mp_policy.reduce_dtype),
            "forward_prefetch": len(state._states_to_forward_prefetch or []),
            "optimizer_on_shards": isinstance(run.optimizer.param_groups[0]["params"][0], DTensor)}


def _timed_collectives(run: Training, inputs: Any, targets: Any, sync: bool) -> dict[str, Any]:
    """The all-gathers and reduce-scatters FSDP2 made in the timed part of one unit of the
    communication counterfactual (measure/shard_comm.sharded_timer: the real step, or the same
    step gathered beforehand), from a profile of it: what follows its barrier (the gathering
    before it is not timed)."""
    from torch.profiler import ProfilerActivity, profile

    from autotune.diagnose.shard_trace import shard_fields
    from autotune.diagnose.trace_events import events
    from autotune.measure.shard_comm import sharded_timer

    timed = sharded_timer(run, inputs, targets, Clock(run.device), 1, comm.barrier)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed(sync)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "unit.json"
        prof.export_chrome_trace(str(path))
        spans, _ = events(json.loads(path.read_text()))
    host = [e for e in spans if e.cat in ("cpu_op", "user_annotation", "operator")]
    start = max(e.end for e in host if e.name == "c10d::barrier")
    fields = shard_fields(spans, start, max(e.end for e in host), 1)
    return {k: fields[k] for k in ("all_gathers", "reduce_scatters")}


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wl = GPTWorkload(vocab=64, seq_len=8, d_model=16, n_layer=4, n_head=2, n_sequences=64,
                     batch_size=4)
    base = build_space(probe("cpu"), wl, {}).baseline
    report: dict[str, Any] = {}
    for name, knobs in CONFIGS.items():
        accum = 2 if name in ("ddp_accumulating", "accumulating", "no_sync") else 1
        run = Training(wl, {**base, **knobs}, "cpu", seed=0, grad_accum=accum)
        torch.manual_seed(100 + rank)  # each rank its own micro-batches
        micro = [(torch.randint(0, 64, (4, 8)), torch.randint(0, 64, (4, 8))) for _ in range(2)]
        seen: dict[str, Any] = {}
        if run.fsdp is not None:
            seen.update(_blocks_state(run))
            handle = run.model.blocks[0].register_forward_hook(
                lambda m, i, o, seen=seen: seen.update(
                    resharded_after_forward=isinstance(m.qkv.weight, DTensor)))
        run.forward_backward(*micro[0])
        if run.fsdp is not None:
            handle.remove()
            # Reduced: resharded into DTensor shards holding their gradient; kept gathered
            # (accumulation_no_sync), the parameters are the whole local ones.
            seen["reduced_after_first_micro_batch"] = all(
                isinstance(p, DTensor) and p.grad is not None for p in run.model.parameters())
        if accum == 2:
            run.optimizer_step()  # the cycle's first micro-batch: no optimizer step yet
            run.forward_backward(*micro[1])
        grads = _grads(run.model)  # before the optimizer steps on them
        seen["grads"] = grads.tolist()
        if name in ("ddp", "full_shard", "no_sync"):  # the window's counterfactual here
            beats: list[int] = []
            timed = comm.exposed(run, iter(micro * 100), Clock(run.device), 10.0, 60.0, pairs=4,
                                 beat=beats.append)
            seen["beats"] = beats  # the watchdog heard of every timed unit
            seen["counterfactual"] = {k: timed.get(k) for k in (
                "micro_steps_per_unit", "synced_step_ms", "unsynced_step_ms", "all_gathers",
                "reduce_scatters", "all_gather_ms", "reduce_scatter_ms", "collectives_source")}
            if name == "full_shard":  # what each side of a timed pair ran, counted
                seen["timed_collectives"] = {
                    side: _timed_collectives(run, *micro[0], sync)
                    for side, sync in (("with", True), ("without", False))}
            # The same cycle again: the counterfactual left no gradient of its own behind.
            run._micro = 0
            for i in range(accum):
                run._micro = i
                run.forward_backward(*micro[i])
            run._micro = 0
            seen["grads_after_counterfactual"] = _grads(run.model).tolist()
        report[name] = seen
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
    quick_exit(0)  # as verify's sides end: autotune/production/parity.py
