"""CHILD side, one rank of a trial: the ranks' agreements, and how much of a step waits on
gradient communication.

The exposed share is measured, not read off timestamps: where ranks share a node's cores,
gloo's threads time-slice with backward, so a profile's all-reduce spans overlap work they
also slowed. The same step on the same cached batch is timed with DDP's all-reduce and without
it (``no_sync``); what the all-reduce adds to the step is what the run pays for it, whether it
waits on the network, on a peer or for a core.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

#: Steps per timed block; two blocks with the all-reduce and two without, alternating. Each
#: side's figure is the median of its steps, each timed alone: one step a passing disturbance
#: touched (a 2-vCPU VM's per-step times spread 105-212 ms for the same work) does not move it.
COMM_STEPS = 5


def _flag_device() -> torch.device:
    """Where a collective's tensor lives: NCCL reduces device tensors, gloo host ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree(values: list[int]) -> list[int]:
    """One decision for all ranks, each value the largest any rank proposes (stop when any
    rank would; the longest chunk any rank asks for): a chunk edge's only sync."""
    flags = torch.tensor(values, dtype=torch.int64, device=_flag_device())
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return [int(v) for v in flags.tolist()]


def barrier() -> None:
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _gather(values: list[float]) -> list[list[float]]:
    """Every rank's list (same length on all), one row per rank, on every rank."""
    rows = torch.zeros(dist.get_world_size(), len(values), dtype=torch.float64,
                       device=_flag_device())
    rows[dist.get_rank()] = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(rows, op=dist.ReduceOp.SUM)
    return rows.tolist()


def exposed(run: Any, batches: Any, clock: Any, window_step_ms: float,
            steps: int = COMM_STEPS) -> dict[str, Any]:
    """The step with and without the gradient all-reduce, on one cached device batch, and the
    share of the window's median step (``window_step_ms``, loader waits included: the run's
    step) that the all-reduce adds. Each block starts at a barrier, so a rank that finished
    its unsynced block early does not charge its wait to the next synced one.

    With the all-reduce, every step lasts as long as that step's slowest rank; without it,
    each rank runs at its own pace. So the counterfactual is the lockstep one: step i of the
    unsynced blocks taken as the slowest rank's step i (blocks start together). The rest of
    the synced step is what the all-reduce costs. On a noisy 2-vCPU VM (the same step read
    105-212 ms) the median of two ranks' per-step maximum is well above either rank's median:
    that is the ranks' jitter (``rank_gap_ms``, over the fastest rank), real but not
    communication that gradient_as_bucket_view or bigger buckets could hide."""
    inputs, targets = run.to_device(*next(batches))

    def block(sync: bool) -> list[float]:
        run.sync_grads = sync
        barrier()
        times = []
        for _ in range(steps):
            clock.sync(run.device)
            t0 = time.perf_counter()
            run.step(inputs, targets)
            clock.sync(run.device)
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    synced: list[float] = []
    unsynced: list[float] = []
    try:
        for _ in range(2):
            synced += block(True)
            unsynced += block(False)
    finally:
        run.sync_grads = True
    ranks_synced, ranks_unsynced = _gather(synced), _gather(unsynced)
    with_ms = max(statistics.median(row) for row in ranks_synced)
    without_ms = statistics.median(max(step) for step in zip(*ranks_unsynced, strict=True))
    fastest_ms = min(statistics.median(row) for row in ranks_unsynced)
    added = max(0.0, with_ms - without_ms)
    return {"synced_step_ms": with_ms, "unsynced_step_ms": without_ms, "exposed_ms": added,
            "exposed_share": min(1.0, added / max(window_step_ms, with_ms, 1e-9)),
            "rank_gap_ms": max(0.0, without_ms - fastest_ms), "steps": steps,
            "backend": dist.get_backend(), "world_size": dist.get_world_size(),
            # What the ranks' DDP ran with (a framework's rule: Workload.ddp_arguments), for
            # the adapters' exports (ddp_find_unused_parameters, DDPStrategy).
            "find_unused_parameters": bool(getattr(run.ddp, "find_unused_parameters", False))}
