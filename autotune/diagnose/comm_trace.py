"""DDP's gradient all-reduce in a torch.profiler trace: its time per step, the part of it that
backward's compute hid, and the part after backward's compute ended.

What a trace holds for it (torch 2.14, read off real 2-rank traces, see tests/test_comm_trace.py):

* gloo (CPU): DDP launches each bucket's all-reduce as a ``c10d::allreduce_`` op (``cpu_op``)
  on the thread that runs backward, a short enqueue inside the ``AccumulateGrad`` that
  made the bucket ready; the reduction itself runs on gloo's own threads (``pt_gloo_runloop``)
  as a ``gloo:all_reduce`` range (``user_annotation``), one per bucket, that lasts until the
  peers' halves have arrived. No ``record_param_comms`` event is recorded under gloo.
* NCCL (CUDA): the reduction is a GPU kernel, ``ncclDevKernel_AllReduce_*`` (NCCL >= 2.19)
  or ``ncclKernel_AllReduce_*`` (older), on NCCL's own stream; on the host a ``nccl:all_reduce``
  range marks its enqueue. NOT verified here (no GPU on the machine this was written on):
  written from the names NCCL and ProcessGroupNCCL use, so a trace that names them otherwise
  gives ``None`` figures rather than wrong ones.

Backward's compute ends at the end of its last autograd function
(``autograd::engine::evaluate_function: ...``) inside the ``backward`` phase, or where that
function launched a bucket (on the GPU: its last non-NCCL kernel inside the GPU's ``backward``
range); it does not compute while a launch blocks it (a ``c10d::allreduce_`` that lasted most
of the reduction on a rank with one core). The phase itself runs longer: DDP's
``finalize_backward`` waits inside ``loss.backward()`` for the last bucket, so overlap with the
phase label would read as 100% whatever was hidden. The time after the compute's end is what
the step waits for, as DDP's own ``backward_comm_time - backward_compute_comm_overlap_time``.

These are timestamps, and they mislead where ranks share cores: gloo's threads then
time-slice with backward, so a range spans work it also slowed. The exposed share stays the
counterfactual's (measure/comm.py); these figures say where in the step the all-reduce ran.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from autotune.diagnose.trace_events import Event, Interval, merged, minus, overlap

#: gloo's per-bucket reduction, on gloo's own threads.
GLOO_ALLREDUCE = "gloo:all_reduce"
#: ProcessGroupNCCL's host range around an all-reduce's enqueue (unverified here: no GPU).
NCCL_HOST_ALLREDUCE = "nccl:all_reduce"
#: NCCL's all-reduce kernels: ncclDevKernel_AllReduce_Sum_f32_RING_LL (NCCL >= 2.19),
#: ncclKernel_AllReduce_RING_LL_Sum_float (older). Unverified here: no GPU.
NCCL_KERNEL = re.compile(r"^nccl(Dev)?Kernel_AllReduce", re.IGNORECASE)
NCCL_ANY_KERNEL = re.compile(r"^nccl(Dev)?Kernel_", re.IGNORECASE)
#: The dispatcher's all-reduce op: one per bucket DDP launches (any backend).
ALLREDUCE_CALL = "c10d::allreduce_"
#: The autograd engine's range around each backward function.
AUTOGRAD_FN = "autograd::engine::evaluate_function:"


def comm_fields(spans: Sequence[Event], start: float, end: float, n: int) -> dict[str, Any] | None:
    """The trace's all-reduce figures per step, or None where it holds no all-reduce (one
    process). ``spans``: every complete event; ``start``/``end``: the profiled steps' span on
    the host clock; ``n``: the steps.

    ``source``: whose ranges were timed ("gloo", "nccl_kernels", or "nccl_host" where a CUDA
    trace lost its kernels: enqueue ranges only); ``calls_per_step``: all-reduces launched (DDP's
    buckets); ``allreduce_ms_per_step``: union of their ranges; ``backward_overlap_ms_per_step``:
    the part inside backward's compute; ``after_backward_ms_per_step``: the part from the
    compute's end to the next backward (not hidden); ``overlap_share``: hidden / all;
    ``backward_compute_ms_per_step``: backward's compute, for scale. Hidden and after need not
    add up to the whole: a reduction that runs while a launch blocks backward, or before
    backward starts, is neither."""
    in_host = [e for e in spans if start <= e.ts <= end]
    calls = [e for e in in_host if e.name == ALLREDUCE_CALL]
    kernels = [e for e in spans if e.cat == "kernel" and e.ts >= start]
    nccl = [e for e in kernels if NCCL_KERNEL.match(e.name)]
    gloo = [e for e in in_host if e.name == GLOO_ALLREDUCE]
    host_nccl = [e for e in in_host if e.name == NCCL_HOST_ALLREDUCE]
    source, reduce = (("nccl_kernels", nccl) if nccl else ("gloo", gloo) if gloo
                      else ("nccl_host", host_nccl))
    if not reduce and not calls:
        return None
    backward, compute = _backward(in_host, spans, kernels, start, source)
    host_calls = calls if source != "nccl_kernels" else []
    ends = [_compute_end(b, compute, host_calls) for b in backward]
    # Backward computes until its end, but not while a launch blocks it (see _compute_end).
    hidden = minus(merged((b.ts, e) for b, e in zip(backward, ends, strict=True)),
                   merged((c.ts, c.end) for c in host_calls))
    after = _after(backward, ends, max([end, *(e.end for e in reduce)]))
    busy = merged((e.ts, e.end) for e in reduce)
    total = sum(e - s for s, e in busy)
    ms = lambda us: round(us / n / 1e3, 4)  # noqa: E731
    return {
        "source": source if reduce else None,
        "calls_per_step": round(len(calls) / n, 2),
        "allreduce_ms_per_step": ms(total) if reduce else None,
        "backward_overlap_ms_per_step": ms(overlap(busy, hidden)) if reduce and backward else None,
        "after_backward_ms_per_step": ms(overlap(busy, after)) if reduce and backward else None,
        "overlap_share": (round(overlap(busy, hidden) / total, 4)
                          if reduce and backward and total > 0 else None),
        "backward_compute_ms_per_step": ms(sum(e - s for s, e in hidden)) if backward else None,
    }


def _backward(in_host: list[Any], spans: Sequence[Event], kernels: list[Any], start: float,
              source: str) -> tuple[list[Any], list[Any]]:
    """The backward ranges and the events that are its compute: on the GPU timeline where
    NCCL's kernels are the all-reduce (they run on the GPU's clock, after the host launched
    them), else on the host."""
    if source == "nccl_kernels":
        gpu = [e for e in spans if e.cat == "gpu_user_annotation" and e.name == "backward"
               and e.ts >= start]
        if gpu:
            return (sorted(gpu, key=lambda e: e.ts),
                    [e for e in kernels if not NCCL_ANY_KERNEL.match(e.name)])
    host = [e for e in in_host if e.name == "backward"
            and e.cat in ("user_annotation", "cpu_op", "operator", "")]
    return sorted(host, key=lambda e: e.ts), [e for e in in_host if e.name.startswith(AUTOGRAD_FN)]


def _compute_end(b: Event, compute: list[Any], calls: list[Any]) -> float:
    """The end of the last compute event that starts inside ``b`` (``b``'s end if none); one
    that launched a bucket ends where its ``c10d::allreduce_`` began, the moment DDP calls its
    backward's compute done: the call can last most of the reduction (9.4 of a 12 ms gloo
    all-reduce, seen on a rank with one core), and that wait is not compute."""
    ends = []
    for e in compute:
        if b.ts <= e.ts <= b.end:
            launched = [c.ts for c in calls if e.ts <= c.ts <= e.end]
            ends.append(min(launched) if launched else e.end)
    return min(b.end, max(ends)) if ends else b.end


def _after(backward: list[Any], ends: list[float], last: float) -> list[Interval]:
    """From each backward's compute end (``ends``) to the next backward's start (the last:
    ``last``): an all-reduce then runs while nothing of backward is left to hide it."""
    nxt = [b.ts for b in backward[1:]] + [last]
    return merged((e, max(e, x)) for e, x in zip(ends, nxt, strict=True))
