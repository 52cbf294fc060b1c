"""A sharded model's collectives in a torch.profiler trace: FSDP2's parameter all-gathers and
gradient reduce-scatters, their time per step and how many a step makes.

What a trace holds for them (torch 2.14, read off real 2-rank FSDP2 traces, see
tests/test_shard_trace.py):

* gloo (CPU): FSDP2 launches each group's all-gather as ``c10d::_allgather_base_`` and each
  reduce-scatter as ``c10d::_reduce_scatter_base_`` (``cpu_op``) on the thread that runs the
  step; the collective itself runs on gloo's own threads as a ``gloo:all_gather`` range, and
  the reduce-scatter as a ``gloo:all_reduce`` range: gloo has no reduce-scatter and runs an
  all-reduce of the whole gradient instead (https://github.com/pytorch/pytorch/issues/118911),
  so its bytes and time are an all-reduce's, not NCCL's reduce-scatter's.
* NCCL (CUDA): ``ncclDevKernel_AllGather_*`` and ``ncclDevKernel_ReduceScatter_*`` kernels
  (``ncclKernel_*`` before NCCL 2.19) on NCCL's stream, and host ranges named ``nccl:`` after
  the op. NOT verified here (no GPU on the machine this was written on): written from the
  names NCCL and ProcessGroupNCCL use, so a trace that names them otherwise gives ``None``.

These are timestamps: where ranks share cores, gloo's threads time-slice with the step's
compute, so a range spans work it also slowed. What the step waits on them is measured by the
counterfactual (measure/shard_comm.py); these say how long they ran and how many there were.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from autotune.diagnose.trace_events import Event, merged

#: The dispatcher's calls FSDP2 makes, per collective (any backend).
ALL_GATHER_CALLS = ("c10d::_allgather_base_", "c10d::allgather_into_tensor_coalesced_",
                    "c10d::allgather_")
REDUCE_SCATTER_CALLS = ("c10d::_reduce_scatter_base_", "c10d::reduce_scatter_tensor_coalesced_",
                        "c10d::reduce_scatter_")
#: gloo's ranges, on its own threads (its reduce-scatter is an all-reduce, see above).
GLOO = {"all_gather": "gloo:all_gather", "reduce_scatter": "gloo:all_reduce"}
#: NCCL's kernels and host ranges (unverified here: no GPU).
NCCL_KERNELS = {"all_gather": re.compile(r"^nccl(Dev)?Kernel_AllGather", re.IGNORECASE),
                "reduce_scatter": re.compile(r"^nccl(Dev)?Kernel_ReduceScatter", re.IGNORECASE)}
NCCL_HOST = {"all_gather": re.compile(r"^nccl:.*all_?gather", re.IGNORECASE),
             "reduce_scatter": re.compile(r"^nccl:.*reduce_scatter", re.IGNORECASE)}


def shard_fields(spans: Sequence[Event], start: float, end: float, n: int) -> dict[str, Any]:
    """Per step: ``all_gather_ms`` and ``reduce_scatter_ms`` (the union of each collective's
    ranges), ``all_gathers`` and ``reduce_scatters`` (the calls FSDP2 made), and
    ``collectives_source`` ("gloo", "nccl_kernels" or "nccl_host"; None where the trace holds
    no collective). ``spans``: every complete event; ``start``/``end``: the profiled steps on
    the host clock; ``n``: the steps."""
    steps = max(1, n)
    in_host = [e for e in spans if start <= e.ts <= end]
    kernels = [e for e in spans if e.cat == "kernel" and e.ts >= start]
    out: dict[str, Any] = {
        "all_gathers": round(sum(e.name in ALL_GATHER_CALLS for e in in_host) / steps, 2),
        "reduce_scatters": round(sum(e.name in REDUCE_SCATTER_CALLS for e in in_host) / steps, 2),
    }
    source = None
    for kind in ("all_gather", "reduce_scatter"):
        ranges, found = _ranges(kind, in_host, kernels)
        source = source or found
        busy = merged((e.ts, e.end) for e in ranges)
        out[f"{kind}_ms"] = round(sum(b - a for a, b in busy) / steps / 1e3, 4) if ranges else None
    out["collectives_source"] = source
    return out


def _ranges(kind: str, in_host: list[Event], kernels: list[Event]) -> tuple[list[Event], str | None]:
    """The collective's ranges in the most direct record the trace has: NCCL's kernels, gloo's
    ranges, or NCCL's host ranges where a CUDA trace lost its kernels."""
    nccl = [e for e in kernels if NCCL_KERNELS[kind].match(e.name)]
    if nccl:
        return nccl, "nccl_kernels"
    gloo = [e for e in in_host if e.name == GLOO[kind]]
    if gloo:
        return gloo, "gloo"
    host = [e for e in in_host if NCCL_HOST[kind].match(e.name)]
    return host, "nccl_host" if host else None
