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
    communication that gradient_as_bucket_view or bigger buckets could hide.

    Beside it, DDP's own timing of the same synced steps (``DdpLog``: ``ddp_comm_ms``,
    ``ddp_overlap_ms``, ``ddp_compute_ms``, ``ddp_overlap_share``): a cross-check of where
    the all-reduce ran, from DDP's timestamps, which mislead as the trace's do where ranks
    share cores."""
    inputs, targets = run.to_device(*next(batches))

    # With accumulation_no_sync only one micro-batch of each cycle all-reduces: a median of
    # single micro-steps would be an unsynced one. Each timed unit is then a whole cycle (one
    # all-reduce in it, wherever it starts), per micro-step.
    cycle = run.grad_accum if run.knobs.get("accumulation_no_sync") else 1

    def block(sync: bool) -> list[float]:
        run.sync_grads = sync
        barrier()
        times = []
        for _ in range(steps):
            clock.sync(run.device)
            t0 = time.perf_counter()
            for _ in range(cycle):
                run.step(inputs, targets)
            clock.sync(run.device)
            times.append((time.perf_counter() - t0) * 1e3 / cycle)
            if sync:
                ddp.read()  # outside the timed step
        return times

    synced: list[float] = []
    unsynced: list[float] = []
    ddp = DdpLog(run.ddp)
    try:
        for _ in range(2):
            synced += block(True)
            unsynced += block(False)
    finally:
        run.sync_grads = True
        ddp.close()
    ranks_synced, ranks_unsynced = _gather(synced), _gather(unsynced)
    with_ms = max(statistics.median(row) for row in ranks_synced)
    without_ms = statistics.median(max(step) for step in zip(*ranks_unsynced, strict=True))
    fastest_ms = min(statistics.median(row) for row in ranks_unsynced)
    added = max(0.0, with_ms - without_ms)
    return {"synced_step_ms": with_ms, "unsynced_step_ms": without_ms, "exposed_ms": added,
            "exposed_share": min(1.0, added / max(window_step_ms, with_ms, 1e-9)),
            "rank_gap_ms": max(0.0, without_ms - fastest_ms), "steps": steps,
            "micro_steps_per_unit": cycle,
            "backend": dist.get_backend(), "world_size": dist.get_world_size(),
            # What the ranks' DDP ran with (a framework's rule: Workload.ddp_arguments), for
            # the adapters' exports (ddp_find_unused_parameters, DDPStrategy).
            "find_unused_parameters": bool(getattr(run.ddp, "find_unused_parameters", False)),
            **ddp.figures()}


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
