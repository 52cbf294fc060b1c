"""CHILD side, one rank of a sharded trial: how much of its step waits on FSDP2's collectives,
and how long they run.

The counterfactual (measure/comm.py pairs it with the real step): the same forward and
backward, on the same cached batch, with every parameter gathered beforehand and kept, and no
gradient reduction (core/sharding.gathered): the step's arithmetic without one all-gather or
reduce-scatter. What the real step takes beyond it is what the run pays for its collectives,
exposed behind no compute, whether they wait on the network, a peer or a core. Only forward and
backward are timed on both sides: the optimizer steps the same shards either way (and the
counterfactual leaves it no reduced gradient to step on). The gathered model holds every
parameter per rank meanwhile: the window's peak memory is read before it (measure/window.py).

Their durations come from a short profile of the real step (diagnose/shard_trace.py): the
all-gathers' and reduce-scatters' ranges, and how many a step makes.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from autotune.core import sharding
from autotune.diagnose.shard_trace import shard_fields
from autotune.diagnose.trace_events import events

#: Steps in the collectives' profile (after the counterfactual's pairs: the step is warm).
COLLECTIVE_STEPS = 2


def sharded_timer(run: Any, inputs: Any, targets: Any, clock: Any, cycle: int,
                  barrier: Callable[[], None]) -> Callable[[bool], float]:
    """A function timing one unit (``cycle`` micro-steps' forward and backward, per
    micro-step) with the collectives (True) or gathered without them (False). The gathering
    happens before the barrier, outside the timed part; no optimizer step is taken."""

    def timed(sync: bool) -> float:
        run.sync_grads = sync  # False: forward_backward leaves FSDP2's flags to gathered()
        context = contextlib.nullcontext() if sync else sharding.gathered(run.fsdp, run.knobs)
        try:
            with context:
                barrier()
                clock.sync(run.device)
                t0 = time.perf_counter()
                for micro in range(cycle):
                    run._micro = micro
                    run.forward_backward(inputs, targets)
                clock.sync(run.device)
                return (time.perf_counter() - t0) * 1e3 / cycle
        finally:
            run._micro = 0

    return timed


def collectives(run: Any, inputs: Any, targets: Any, cycle: int = 1,
                steps: int = COLLECTIVE_STEPS,
                beat: Callable[[int], None] = lambda n: None) -> dict[str, Any]:
    """The real step's all-gathers and reduce-scatters from a profile of ``steps`` units of
    ``cycle`` micro-steps' forward and backward (an accumulation cycle as the run takes it,
    so that it ends reduced and resharded): per micro-step, their time (ms) and count.
    Evidence, never a failure: an error comes back as ``collectives_error``."""
    try:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.device(run.device).type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            try:
                for step in range(steps):
                    for micro in range(cycle):
                        run._micro = micro
                        run.forward_backward(inputs, targets)
                    beat(step + 1)  # the watchdog: long steps are not a stall
            finally:
                run._micro = 0
            if torch.device(run.device).type == "cuda":
                torch.cuda.synchronize(run.device)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "collectives.json"
            prof.export_chrome_trace(str(path))
            spans, _ = events(json.loads(path.read_text(encoding="utf-8")))
        host = [e for e in spans if e.cat in ("cpu_op", "user_annotation", "operator")]
        start = min((e.ts for e in host), default=0.0)
        end = max((e.end for e in host), default=0.0)
        return shard_fields(spans, start, end, steps * cycle)
    except Exception as exc:  # noqa: BLE001 - evidence, not a gate
        return {"collectives_error": f"{type(exc).__name__}: {exc}"[:300]}
