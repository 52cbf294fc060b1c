"""CHILD side, one rank of a trial: the ranks' agreements, and how much of a step waits on
gradient communication (a sharded model's all-gathers and reduce-scatters: measure/shard_comm.py).

The exposed share is measured, not read off timestamps: where ranks share a node's cores,
gloo's threads time-slice with backward, so a profile's all-reduce spans overlap work they
also slowed. The same step on the same cached batch is timed with DDP's all-reduce and without
it (``no_sync``); what the all-reduce adds to the step is what the run pays for it, whether it
waits on the network, on a peer or for a core.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

#: Pairs of timed steps per rank: each pair one step with the all-reduce and one without,
#: adjacent in time (their order alternating), each started at a barrier. Pairs, not blocks: on
#: a 2-vCPU VM the same step reads 105-212 ms, and a slow second touched one block of five steps
#: and not the other (a compute-heavy model read 25.6% exposed with alternating blocks,
#: 2026-11-26; its DDP timed 4 ms of all-reduce in a 176 ms step).
COMM_PAIRS = 10
#: Where steps are long, the pairs stop after this many once they have taken the window's own
#: measuring time (window.measure_seconds): 10 pairs of a 4.7 s step (the README's CPU study
#: as 2 ranks, batch 128) took 93 s of a 133 s trial, and in all the counterfactual was about
#: 60% of that study's search (2026-11-26/27). Six pairs still give a bound: their smallest
#: difference, which the median lies below with probability 1/64.
COMM_MIN_PAIRS = 6
#: The exposed time's lower bound is the order statistic of the paired differences below
#: which their median lies with at most this probability (the sign test's binomial): for 10
#: pairs the 3rd smallest, 5.5%.
COMM_LOWER_ALPHA = 0.06


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


def exposed(run: Any, batches: Any, clock: Any, window_step_ms: float, budget_s: float,
            pairs: int = COMM_PAIRS,
            beat: Callable[[int], None] = lambda n: None) -> dict[str, Any]:
    """The step with and without the gradient all-reduce, on one cached device batch, and the
    share of the window's median step (``window_step_ms``, loader waits included: the run's
    step) that the all-reduce adds, with a lower bound.

    Every timed step starts at a barrier, so all ranks start it together, and each pair's two
    steps are adjacent: a disturbance that lasts a second touches both. With the all-reduce a
    step lasts as long as its slowest rank; without it each rank runs at its own pace, so the
    counterfactual is the lockstep one: each step as its slowest rank's. A pair's difference
    is what the all-reduce added to that step; the exposed time is their median, and
    ``exposed_share_low`` the sign test's lower bound for it (COMM_LOWER_ALPHA), which the
    verdict compares with its threshold: a noisy median alone called a compute-heavy model
    communication-bound. On a noisy 2-vCPU VM the lockstep step is well above either rank's
    median: that is the ranks' jitter (``rank_gap_ms``, over the fastest rank), real but not
    communication that gradient_as_bucket_view or bigger buckets could hide. ``beat(n)``
    after each timed unit tells the trial's watchdog that long steps are not a stall (20
    steps of a sharded 67M-parameter Llama on a loaded 2-core VM outlasted its 120 s limit).

    Beside it, DDP's own timing of the same synced steps (``DdpLog``: ``ddp_comm_ms``,
    ``ddp_overlap_ms``, ``ddp_compute_ms``, ``ddp_overlap_share``): a cross-check of where
    the all-reduce ran, from DDP's timestamps, which mislead as the trace's do where ranks
    share cores."""
    inputs, targets = run.to_device(*next(batches))

    # With accumulation_no_sync only one micro-batch of each cycle all-reduces: a median of
    # single micro-steps would be an unsynced one. Each timed unit is then a whole cycle (one
    # all-reduce in it, wherever it starts), per micro-step.
    cycle = run.grad_accum if run.knobs.get("accumulation_no_sync") else 1
    ddp = DdpLog(run.ddp)
    if run.fsdp is not None:
        from autotune.measure.shard_comm import sharded_timer

        timed = sharded_timer(run, inputs, targets, clock, cycle, barrier)
    else:
        def timed(sync: bool) -> float:
            run.sync_grads = sync
            barrier()
            clock.sync(run.device)
            t0 = time.perf_counter()
            for _ in range(cycle):
                run.step(inputs, targets)
            clock.sync(run.device)
            ms = (time.perf_counter() - t0) * 1e3 / cycle
            if sync:
                ddp.read()  # outside the timed step
            return ms

    synced: list[float] = []
    unsynced: list[float] = []
    start = time.perf_counter()
    try:
        for pair in range(pairs):
            # One decision for all ranks: every step of a pair starts at a barrier.
            if pair >= COMM_MIN_PAIRS and agree([int(time.perf_counter() - start > budget_s)])[0]:
                break
            first = pair % 2 == 0  # the synced step first in every other pair
            a = timed(first)
            beat(2 * pair + 1)
            b = timed(not first)
            beat(2 * pair + 2)
            synced.append(a if first else b)
            unsynced.append(b if first else a)
    finally:
        run.sync_grads = True
        ddp.close()
    return {**_lockstep(synced, unsynced, window_step_ms),
            "micro_steps_per_unit": cycle,
            "backend": dist.get_backend(), "world_size": dist.get_world_size(),
            # What the ranks' DDP ran with (a framework's rule: Workload.ddp_arguments), for
            # the adapters' exports (ddp_find_unused_parameters, DDPStrategy).
            "find_unused_parameters": bool(getattr(run.ddp, "find_unused_parameters", False)),
            **(sharded_figures(run, inputs, targets, cycle, beat) if run.fsdp is not None
               else ddp.figures())}


def _lockstep(synced: list[float], unsynced: list[float], window_step_ms: float
              ) -> dict[str, Any]:
    """The exposed all-reduce from this rank's step pairs and every other rank's (a collective:
    every rank calls it): each step as its slowest rank's, the pairs' differences' median and
    sign-test lower bound as shares of the step, and the ranks' jitter."""
    lock_synced = [max(step) for step in zip(*_gather(synced), strict=True)]
    ranks_unsynced = _gather(unsynced)
    lock_unsynced = [max(step) for step in zip(*ranks_unsynced, strict=True)]
    added = sorted(s - u for s, u in zip(lock_synced, lock_unsynced, strict=True))
    with_ms = statistics.median(lock_synced)
    without_ms = statistics.median(lock_unsynced)
    fastest_ms = min(statistics.median(row) for row in ranks_unsynced)
    median_ms = max(0.0, statistics.median(added))
    low_ms = max(0.0, added[_lower_index(len(added), COMM_LOWER_ALPHA)])
    step = max(window_step_ms, with_ms, 1e-9)
    return {"synced_step_ms": with_ms, "unsynced_step_ms": without_ms, "exposed_ms": median_ms,
            "exposed_share": min(1.0, median_ms / step),
            "exposed_ms_low": low_ms, "exposed_share_low": min(1.0, low_ms / step),
            "pairs": len(added), "rank_gap_ms": max(0.0, without_ms - fastest_ms)}


def sharded_figures(run: Any, inputs: Any, targets: Any, cycle: int,
                    beat: Callable[[int], None] = lambda n: None) -> dict[str, Any]:
    """A sharded model's collectives, timed in a short profile (measure/shard_comm.py)."""
    from autotune.core import sharding
    from autotune.measure.shard_comm import collectives

    layers = run.workload.shard_layers or run.workload.checkpoint_layers
    found = sharding.blocks(run.model, layers)
    types = sorted({_unsharded_name(getattr(m, "_checkpoint_wrapped_module", m)) for m in found})
    return {"sharding": run.knobs.get("sharding"), "block_types": types, "blocks": len(found),
            **collectives(run, inputs, targets, cycle, beat=beat)}


def _lower_index(n: int, alpha: float) -> int:
    """The 0-based index of the largest order statistic of ``n`` values that their median lies
    below with probability at most ``alpha`` (the sign test; 0, the smallest, where none
    does: too few pairs for a bound)."""
    below, k = 0.0, 0
    for j in range(n):
        below += math.comb(n, j) / 2 ** n  # P(at most j values below the median)
        if below > alpha:
            break
        k = j  # the median lies below the (j+1)-th smallest with probability ``below``
    return k


#: DDP's sampling of its runtime stats: its first 10 iterations, then every 100th
#: (``kDDPRuntimeLoggingSampleRate`` in torch's reducer; no getter to read it back).
DDP_SAMPLE_RATE = 100
#: DDP's per-iteration stats (ns) -> this rank's comm keys (ms): its all-reduce's span (first
#: bucket launched to last reduced), the part before backward's compute ended, the compute.
DDP_FIGURES = {"backward_comm_time": "ddp_comm_ms",
               "backward_compute_comm_overlap_time": "ddp_overlap_ms",
               "backward_compute_time": "ddp_compute_ms"}


class DdpLog:
    """DDP's own timing of the counterfactual's synced steps: a cross-check of the trace.

    DDP times its backward's compute and all-reduce only on the iterations it samples, and its
    ``avg_*`` figures average every sample since it was built: the first 10 iterations are
    warm-up (compile, bucket rebuild), so at a window's end they describe the warm-up. Here
    every synced step is sampled (rate 1, put back after), and each step's own figures are
    read: DDP fills them at the next synced forward, for the step before, so the first read
    holds the window's last step (or, past DDP's first 10 iterations, the last one it sampled
    before), which is dropped, and a read is new only when its ``backward_compute_time_start``
    is. On CUDA the sampling synchronizes the step before's events at each forward: they are
    done, each step is timed synchronized."""

    def __init__(self, ddp: Any) -> None:
        self.ddp, self.note, self.first = ddp, "", True
        self.rows: list[dict[str, float]] = []
        self.seen: set[Any] = set()
        if ddp is None:
            self.note = "no DDP wrapper"
            return
        try:
            ddp._set_ddp_runtime_logging_sample_rate(1)
        except Exception as exc:  # noqa: BLE001 - a prototype API: evidence, never a failure
            self.ddp, self.note = None, f"DDP's logging unavailable: {type(exc).__name__}: {exc}"

    def read(self) -> None:
        """The step before's figures, where DDP has filled them since the last read."""
        if self.ddp is None:
            return
        try:
            data = self.ddp._get_ddp_logging_data()
        except Exception as exc:  # noqa: BLE001 - evidence, never a failure
            self.ddp, self.note = None, f"DDP's logging failed: {type(exc).__name__}: {exc}"
            return
        stamp, first, self.first = data.get("backward_compute_time_start"), self.first, False
        if stamp is None or stamp in self.seen or not all(k in data for k in DDP_FIGURES):
            return
        self.seen.add(stamp)
        if not first:  # the first read is the step before the counterfactual's: dropped
            self.rows.append({mine: data[k] / 1e6 for k, mine in DDP_FIGURES.items()})

    def close(self) -> None:
        """DDP's own sampling back: sampling every step synchronizes every CUDA step."""
        if self.ddp is not None:
            self.ddp._set_ddp_runtime_logging_sample_rate(DDP_SAMPLE_RATE)

    def figures(self) -> dict[str, Any]:
        """Medians over the steps DDP timed (ms), their count, and ``ddp_note`` saying why
        they are None where DDP recorded none (no wrapper, a reducer that does not sample:
        compiled autograd's Python reducer, a graph that delays its all-reduce)."""
        if not self.rows:
            return {**dict.fromkeys(DDP_FIGURES.values()), "ddp_overlap_share": None,
                    "ddp_steps": 0, "ddp_note": self.note or "DDP recorded no runtime stats"}
        out: dict[str, Any] = {mine: round(statistics.median(r[mine] for r in self.rows), 4)
                               for mine in DDP_FIGURES.values()}
        comm_ms = out["ddp_comm_ms"]
        out["ddp_overlap_share"] = (round(min(1.0, out["ddp_overlap_ms"] / comm_ms), 4)
                                    if comm_ms > 0 else None)
        return {**out, "ddp_steps": len(self.rows), "ddp_note": None}


def _unsharded_name(module: Any) -> str:
    """A block's own class name: fully_shard swaps its class for ``FSDP<name>``, a subclass
    of FSDPModule and of it."""
    name = type(module).__name__
    own = name.removeprefix("FSDP")
    return own if own != name and any(c.__name__ == own for c in type(module).__mro__) else name
