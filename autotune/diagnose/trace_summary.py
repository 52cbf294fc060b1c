"""The summary of a torch.profiler capture: pure functions over the parsed Chrome trace.

``summarize_trace`` is a pure function over the parsed Chrome-trace JSON, so stored traces can
be re-summarised and unit-tested. It is evidence, not a gate: a category the trace lacks gives
``None``, and an unexpected event shape is skipped rather than raised on.

Summary fields (``*_per_step`` are divided by the number of active steps found):

=============================  ==============================================================
steps                          active steps found (ProfilerStep# events; else ``steps``)
device                         "cuda" when the trace holds GPU activity or CUDA runtime
                               calls, else "cpu"
wall_ms_per_step               span of the ProfilerStep# events / steps (host clock)
gpu_busy_pct                   0-100: union of kernel + memcpy + memset intervals over the
                               step span (extended to the last GPU activity that started in
                               it, since the GPU lags the host). None without GPU activity
kernels_per_step               GPU kernels per step (None on CPU)
kernel_median_us               median kernel duration, us (None on CPU)
short_kernel_share             0-1: share of kernels shorter than SHORT_KERNEL_US
low_precision_kernel_share     0-1: share of kernel *time* in kernels whose name suggests
                               fp16/bf16/tensor cores. A name heuristic (see
                               LOW_PRECISION_MARKERS): cuBLAS/cuDNN/CUTLASS name their kernels by
                               data type and instruction (hmma, xmma, tensorop, f16, bf16), but
                               it is a hint, not a proof. None on CPU
top_kernels                    up to 5 {name, ms_per_step} by total GPU time
h2d_ms_per_step                Memcpy HtoD time (None on CPU)
h2d_bytes_per_step             bytes copied HtoD, where the trace records them (else None)
d2h_copies_per_step            Memcpy DtoH count (small ones are the trace of .item() syncs)
syncs_per_step                 host<->device synchronizations: the aten::_local_scalar_dense
                               ops (what .item()/float(t)/bool(t) run; aten::item where the
                               trace has no _local_scalar_dense) that wait on the device (a
                               runtime copy or sync call inside them: a CUDA tensor's value),
                               plus the runtime calls in SYNC_CALLS not nested inside one. A
                               read of a CPU tensor (AdamW's step counters; any read on a CPU
                               run) is not a sync
scalar_reads_per_step          all scalar reads, device or host
host_scalar_reads_per_step     of those, the reads of CPU tensors (no device wait)
copy_syncs_per_step            of those, the ones inside the ``copy`` phase (a blocking
                               host-to-device copy synchronizes; that is the copy's cost, not a
                               sync in the step)
stage_syncs_per_step           of those, the ones inside the device input stages (``stages``:
                               on an H100 a JPEG study's decode_jpeg(device="cuda") stage
                               synchronized about once per image, 22 a step at batch 32)
sync_ms_per_step               host time spent in those synchronizations
launches_per_step              kernel-launch runtime/driver calls (cudaLaunchKernel*,
                               cuLaunchKernel*, cudaGraphLaunch); None on CPU
data_ms_per_step               the ``data`` range: waiting for the next batch (host)
phase_ms_per_step              {copy, forward, backward, optimizer} host-side durations of the
                               Training.phase() ranges (None where absent; ``graph_replay``
                               added when CUDA Graphs replay the step)
phase_gpu_ms_per_step          the same ranges on the GPU timeline (None on CPU)
cpu_op_ms_per_step             self time of all CPU ops (per thread: union of op intervals)
top_cpu_ops                    up to 5 {name, self_ms_per_step}
peak_allocated_mb              {cpu, cuda}: peak "Total Allocated" of the [memory] events
comm                           DDP's all-reduce per step and its overlap with backward's
                               compute (diagnose/comm_trace.py); None without all-reduces
=============================  ==============================================================
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Any

from autotune.core.numbers import finite
from autotune.diagnose.comm_trace import comm_fields
from autotune.diagnose.thresholds import SHORT_KERNEL_US  # tiny kernels = launch overhead
from autotune.diagnose.trace_events import (
    Event,
    Points,
    Spans,
    by_tid,
    covered,
    events,
    self_times,
)

PHASES = ("copy", "forward", "backward", "optimizer")
# Runtime/driver calls that block the host until the device catches up. ``cudaMemcpy`` (the
# synchronous one) is matched exactly; cudaMemcpyAsync is not a sync by itself.
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cuStreamSynchronize",
    "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD",
})
SCALAR_READS = ("aten::_local_scalar_dense", "aten::item")
# Copy calls of the runtime/driver (cudaMemcpy, cudaMemcpyAsync, cuMemcpyDtoHAsync...): inside a
# scalar read, the device-to-host copy of its value.
MEMCPY_RE = re.compile(r"cu(da)?Memcpy")
LAUNCH_RE = re.compile(r"Launch\w*Kernel|GraphLaunch")
# Kernel-name fragments that suggest fp16/bf16 or tensor-core math (heuristic, lower case).
LOW_PRECISION_MARKERS = (
    "fp16", "bf16", "bfloat16", "half", "f16", "hmma", "tensorop", "xmma", "wgmma", "gmma",
    "h16816", "s16816", "h1688", "s1688", "h884", "s884",
)
_GEMM_16 = re.compile(r"(?<![x\d])16")  # "gemm" with a 16 that is not a tile size (x16)
TOP_N = 5
NAME_CHARS = 160


def is_low_precision_kernel(name: str) -> bool:
    """Heuristic: does a kernel name suggest fp16/bf16 or tensor-core math?"""
    low = name.lower()
    if any(m in low for m in LOW_PRECISION_MARKERS):
        return True
    return "gemm" in low and bool(_GEMM_16.search(low))


def _ms(us: float, n: int) -> float:
    return round(us / n / 1e3, 4)


def summarize_trace(trace: dict[str, Any], steps: int) -> dict[str, Any]:
    """Per-step numbers from a parsed torch.profiler Chrome trace (see the module docstring).
    Pure and total: never raises on a trace shape it does not expect."""
    try:
        return _summarize(trace, steps)
    except Exception as exc:  # noqa: BLE001 - evidence, not a gate
        return {"error": f"summarize_trace: {type(exc).__name__}: {exc}"[:500]}


def _summarize(trace: dict[str, Any], steps: int) -> dict[str, Any]:
    """The summary in its phases: parse the events, find the profiled steps, then the GPU's
    activity, the host's phases, its ops, its synchronizations and the memory peaks."""
    spans, memory = events(trace)
    device_cats = ("kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation")
    host = [e for e in spans if e.cat not in device_cats and e.cat != "trace"]
    n, start, end = _step_window(host, steps)
    host = [e for e in host if start <= e.ts <= end]
    gpu = {cat: [e for e in spans if e.cat in cats and e.ts >= start] for cat, cats in (
        ("kernel", ("kernel",)), ("memcpy", ("gpu_memcpy", "memcpy")),
        ("memset", ("gpu_memset", "memset")), ("annotation", ("gpu_user_annotation",)))}
    # GPU numbers need GPU activity records; a CPU-only run on a GPU host lists the GPUs in
    # deviceProperties but has none, and a CUDA run whose activity records were lost reports
    # None rather than a misleading 0% busy.
    has_gpu = bool(gpu["kernel"] or gpu["memcpy"] or gpu["memset"])
    out: dict[str, Any] = {
        "steps": n,
        "device": "cuda" if has_gpu or any(e.cat.startswith("cuda") for e in host) else "cpu",
        "wall_ms_per_step": _ms(end - start, n),
    }
    out |= _gpu_fields(gpu, n, start, end) if has_gpu else _NO_GPU_FIELDS
    by_name = _labelled(host)
    out |= _phase_fields(by_name, gpu["annotation"] if has_gpu else None, n)
    ops = [e for e in host if e.cat in ("cpu_op", "operator")]
    out |= _cpu_op_fields(ops, n)
    runtime = [e for e in host if e.cat in ("cuda_runtime", "cuda_driver", "runtime", "driver")]
    out |= _sync_fields(ops, runtime, by_name.get("copy", []), n, by_name.get("stages", []))
    if has_gpu:
        launches = [e for e in runtime if LAUNCH_RE.search(e.name)]
        rt_launch_at = Spans(e for e in launches if e.cat in ("cuda_runtime", "runtime"))
        counted = [e for e in launches if e.cat in ("cuda_runtime", "runtime")
                   or not rt_launch_at.contain(e)]
        out["launches_per_step"] = round(len(counted) / n, 2)
    else:
        out["launches_per_step"] = None
    out["peak_allocated_mb"] = _memory_peaks(memory)
    out["comm"] = comm_fields(spans, start, end, n)
    return out


def _step_window(host: list[Event], steps: int) -> tuple[int, float, float]:
    """(steps, start, end): the span of the ProfilerStep# events, else of all host events."""
    step_evs = [e for e in host if e.name.startswith("ProfilerStep#")]
    if step_evs:
        return len(step_evs), min(e.ts for e in step_evs), max(e.end for e in step_evs)
    n = max(1, int(steps or 1))
    return (n, min((e.ts for e in host), default=0.0), max((e.end for e in host), default=0.0))


_NO_GPU_FIELDS: dict[str, Any] = {
    **dict.fromkeys(("gpu_busy_pct", "kernels_per_step", "kernel_median_us",
                     "short_kernel_share", "low_precision_kernel_share", "h2d_ms_per_step",
                     "h2d_bytes_per_step", "d2h_copies_per_step")),
    "top_kernels": [],
}


def _gpu_fields(gpu: dict[str, list[Event]], n: int, start: float, end: float) -> dict[str, Any]:
    """Busy share, kernel shape and copies on the GPU timeline."""
    kernels, memcpy = gpu["kernel"], gpu["memcpy"]
    acts = kernels + memcpy + gpu["memset"]
    out: dict[str, Any] = {}
    # GPU work lags the host: the window runs to the end of the last activity that started
    # in it (and past the host's last step end only if the GPU is still busy then).
    gpu_end = max([end] + [e.end for e in acts])
    window = gpu_end - start
    busy = covered((max(e.ts, start), min(e.end, gpu_end)) for e in acts)
    out["gpu_busy_pct"] = round(100.0 * busy / window, 2) if window > 0 else None
    out["kernels_per_step"] = round(len(kernels) / n, 2)
    durs = [e.dur for e in kernels]
    out["kernel_median_us"] = round(statistics.median(durs), 3) if durs else None
    out["short_kernel_share"] = (
        round(sum(d < SHORT_KERNEL_US for d in durs) / len(durs), 4) if durs else None
    )
    ktime = sum(durs)
    lp = sum(e.dur for e in kernels if is_low_precision_kernel(e.name))
    out["low_precision_kernel_share"] = round(lp / ktime, 4) if ktime > 0 else None
    per_kernel: dict[str, float] = defaultdict(float)
    for e in kernels:
        per_kernel[e.name[:NAME_CHARS]] += e.dur
    out["top_kernels"] = [
        {"name": k, "ms_per_step": _ms(v, n)}
        for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:TOP_N]
    ]
    h2d = [e for e in memcpy if "htod" in e.name.lower().replace(" ", "") or "h2d" in e.name.lower()]
    d2h = [e for e in memcpy if "dtoh" in e.name.lower().replace(" ", "") or "d2h" in e.name.lower()]
    out["h2d_ms_per_step"] = _ms(sum(e.dur for e in h2d), n)
    sizes = [finite(e.args.get("bytes", e.args.get("Bytes"))) for e in h2d]
    out["h2d_bytes_per_step"] = (
        round(sum(s for s in sizes if s is not None) / n) if h2d and all(s is not None for s in sizes) else None
    )
    out["d2h_copies_per_step"] = round(len(d2h) / n, 2)
    return out


def _labelled(host: list[Event]) -> dict[str, list[Event]]:
    """The window's and Training's record_function ranges by name ("user_annotation"; older
    traces filed them as ops)."""
    labels = ("data", *PHASES, "graph_replay", "stages")
    by_name: dict[str, list[Event]] = defaultdict(list)
    for e in host:
        if e.name in labels and e.cat in ("user_annotation", "cpu_op", "operator", ""):
            by_name[e.name].append(e)
    return by_name


def _phase_fields(by_name: dict[str, list[Event]], gpu_ann: list[Event] | None, n: int) -> dict[str, Any]:
    """Per-step time in each phase: host ranges, and the same ranges on the GPU timeline."""
    data = by_name.get("data", [])
    phases: dict[str, float | None] = {
        p: (_ms(sum(e.dur for e in by_name[p]), n) if by_name.get(p) else None) for p in PHASES
    }
    if by_name.get("graph_replay"):
        phases["graph_replay"] = _ms(sum(e.dur for e in by_name["graph_replay"]), n)
    out: dict[str, Any] = {
        "data_ms_per_step": _ms(sum(e.dur for e in data), n) if data else None,
        "phase_ms_per_step": phases,
        "phase_gpu_ms_per_step": None,
    }
    if gpu_ann is not None:
        gpu_by_name: dict[str, float] = defaultdict(float)
        for e in gpu_ann:
            gpu_by_name[e.name] += e.dur
        gphases = {p: (_ms(gpu_by_name[p], n) if p in gpu_by_name else None) for p in PHASES}
        if "graph_replay" in gpu_by_name:
            gphases["graph_replay"] = _ms(gpu_by_name["graph_replay"], n)
        out["phase_gpu_ms_per_step"] = gphases
    return out


def _cpu_op_fields(ops: list[Event], n: int) -> dict[str, Any]:
    selfs = self_times(ops)
    return {
        "cpu_op_ms_per_step": _ms(sum(covered(v) for v in by_tid(ops).values()), n),
        "top_cpu_ops": [
            {"name": k[:NAME_CHARS], "self_ms_per_step": _ms(v, n)}
            for k, v in sorted(selfs.items(), key=lambda kv: -kv[1])[:TOP_N]
        ],
    }


def _sync_fields(ops: list[Event], runtime: list[Event], copy_ranges: list[Event], n: int,
                 stage_ranges: list[Event] | None = None) -> dict[str, Any]:
    """Host-device synchronizations: the scalar reads that wait on the device, plus the sync
    runtime calls outside them.

    A scalar read (``.item()``, ``float(t)``) waits on the device only when its tensor is on
    the device: then a device-to-host copy and a stream synchronize run inside it. One on a
    CPU tensor runs no runtime call and waits for nothing: AdamW reads its per-parameter step
    counters (CPU tensors) that way, two per parameter per step, and counting them made every
    transformer trained with AdamW read as sync-bound (152 "syncs" a step on gpt)."""
    scalar = [e for e in ops if e.name == SCALAR_READS[0]]
    if not scalar:
        scalar = [e for e in ops if e.name == SCALAR_READS[1]]
    sync_calls = [e for e in runtime if e.name.strip() in SYNC_CALLS]
    waits = Points(e for e in runtime if e.name.strip() in SYNC_CALLS or MEMCPY_RE.match(e.name))
    device_reads = [e for e in scalar if waits.any_within(e)]
    scalar_at = Spans(scalar)
    syncs = device_reads + [e for e in sync_calls if not scalar_at.contain(e)]
    copy_at, stages_at = Spans(copy_ranges), Spans(stage_ranges or [])
    return {
        "syncs_per_step": round(len(syncs) / n, 2),
        "copy_syncs_per_step": round(sum(copy_at.contain(e) for e in syncs) / n, 2),
        "stage_syncs_per_step": round(sum(stages_at.contain(e) for e in syncs) / n, 2),
        "sync_ms_per_step": _ms(sum(e.dur for e in syncs), n),
        "scalar_reads_per_step": round(len(scalar) / n, 2),
        "host_scalar_reads_per_step": round((len(scalar) - len(device_reads)) / n, 2),
    }


def _memory_peaks(memory: list[dict[str, Any]]) -> dict[str, float | None]:
    """Peak allocations seen by the memory profiler (Device Type 0 = CPU, 1 = CUDA)."""
    peaks: dict[str, float | None] = {"cpu": None, "cuda": None}
    for args in memory:
        dev = finite(args.get("Device Type"))
        kind = {0: "cpu", 1: "cuda"}.get(int(dev)) if dev is not None else None
        total = finite(args.get("Total Allocated"))
        if kind and total is not None:
            peaks[kind] = max(peaks[kind] or 0.0, total / 2**20)
    return {k: (round(v, 3) if v is not None else None) for k, v in peaks.items()}
