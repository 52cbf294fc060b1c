"""PARENT side: from one trial's measurements to a named bottleneck and knob fixes.

Pure functions over plain data (the WindowResult as a dict, its ``trace`` summary from
``autotune/profiling.py``, the trial's knobs): no torch, no CUDA, so the driver can call it.

``diagnose(result, knobs, device, memory_limit_gb)`` returns::

    {"bottleneck": "input_pipeline" | "host_to_device" | "cpu_launch_overhead" | "sync"
                   | "gpu_compute" | "memory" | "cpu_compute",
     "evidence": {named numbers, see _evidence()},
     "rule": "the test that fired, with its numbers",
     "fixes": [{"knob": name, "value": v, "why": "..."}, ...],   # most promising first
     "summary": "one sentence"}

Fixes only name knob values that differ from the trial's; whether a value is valid on this
device / workload (and whether it is active given the other knobs) is the caller's check.

The rules encode the symptom -> cause -> fix tables of the field notes (seeds 000, 002, 003,
004), checked in this order on CUDA (first match wins):

================================  ======================  =====================================
symptom                           bottleneck              fixes
================================  ======================  =====================================
host waits on the loader for      input_pipeline          num_workers up (as many as keep pace;
>= DATA_WAIT_SHARE of the step                            beyond the cores when the loader is
and the GPU is not saturated                              on a CPU < IO_BOUND_CPU_SHARE of the
                                                          time: it waits on I/O),
                                                          persistent_workers, prefetch_factor
                                                          up, pin_memory (CUDA), uint8 transfer,
                                                          transform_split=0 (device stages)
copies take >= H2D_SHARE          host_to_device          pin_memory, non_blocking,
                                                          transfer_dtype=uint8, transform_split=0
>= SYNCS_PER_STEP host-device     sync                    user code (.item(), .cpu(), print of
syncs outside the input copy,                             a tensor): none by knob; amp bf16
GPU not saturated                                         instead of fp16 (GradScaler syncs),
                                                          a bigger batch dilutes them
GPU busy < GPU_STARVED_PCT,       cpu_launch_overhead     cuda_graphs, compile reduce-overhead,
mostly short kernels, many                                bigger batch, fused/foreach optimizer
launches per step
peak memory >= MEMORY_HIGH_SHARE  memory                  amp bf16, smaller batch, set_to_none
of the limit
GPU busy >= GPU_BUSY_HIGH_PCT     gpu_compute             amp bf16, channels_last (images),
                                                          tf32, compile, bigger batch
none of the above, GPU idle       cpu_launch_overhead     (host-side Python/launch overhead)
none of the above, no trace       gpu_compute             (assumed; no profiler evidence)
================================  ======================  =====================================

On CPU: input_pipeline (same test), then memory, else cpu_compute (bf16 autocast with
channels_last for images, channels_last, host_allocator=retain when the step faults in more than
PAGE_FAULTS_PER_STEP pages, a bigger batch, and one more worker only when the loader wait is
still notable).
A bigger batch is only suggested while peak memory is below BATCH_HEADROOM_SHARE of the limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

# --- thresholds (documented, so a verdict can be traced to a number) -------------------------
#: Host waits on the DataLoader for this share of the step: input-bound. Seed 003: the loader
#: wait (t2-t1) "should be much smaller" than the training time (t3-t2).
DATA_WAIT_SHARE = 0.20
#: The loader's processes spent less than this share of their time on a CPU: they wait on
#: I/O (storage, network, a remote service), and more workers than cores can still help.
#: Seed 002: "GPU idle, CPU idle" is a wait, not a computation.
IO_BOUND_CPU_SHARE = 0.5
#: The share of the loader wait spent starting epochs (non-persistent workers shut down and
#: start again) above which the wait is worker start-up, neither I/O nor loading work: the gpt
#: run's 9-worker loader read as "waiting on I/O" at 7% worker CPU while its workers were
#: restarted every 32 steps.
EPOCH_START_SHARE_OF_WAIT = 0.5
#: The optimizer's share of the step above which its per-parameter work is worth a fused
#: implementation (one kernel, or one vectorized loop, for all parameters).
OPTIMIZER_SHARE = 0.25
#: On a compute-bound step, a loader wait this large is still worth one more worker.
DATA_WAIT_NOTABLE = 0.05
#: Minor page faults per step in the training process (4 KiB each: 1,000 is 4 MiB of memory
#: mapped and zeroed anew every step). On CPU a step that allocates its activations afresh.
PAGE_FAULTS_PER_STEP = 1000
#: Host-to-device copies take this share of the step: copy-bound. Seed 004 flagged 10 of 37 ms.
H2D_SHARE = 0.20
#: GPU busy (kernels + copies) at or above this: compute-bound. Seed 000: ">90% GPU utilization".
GPU_BUSY_HIGH_PCT = 90.0
#: GPU busy below this: starved by the host. Seed 002: "GPU utilization < 80%".
GPU_STARVED_PCT = 80.0
#: Kernels shorter than this are launch-dominated. Seed 002: "Many tiny GPU kernels (< 10 us)".
SHORT_KERNEL_US = 10.0
#: ...and launch overhead needs at least this share of them to be tiny,
SHORT_KERNEL_SHARE = 0.5
#: ...and at least this many launches (or kernels) per step (a replayed graph launches once).
MIN_LAUNCHES_PER_STEP = 20
#: Host-device synchronizations per step outside the input copy. A per-step loss.item() for
#: logging is 1, fp16's GradScaler 1: four or more is a pattern (seed 000: "post-processing" of
#: interleaved small device ops and host reads).
SYNCS_PER_STEP = 4
#: Peak memory at or above this share of the limit: memory-bound (no headroom, allocator
#: retries, OOM risk).
MEMORY_HIGH_SHARE = 0.90
#: A bigger batch is suggested only below this share of the limit (doubling the batch roughly
#: doubles activation memory). Seed 004: 1 of 16 GB used -> batch size up.
BATCH_HEADROOM_SHARE = 0.50
#: Tensor-core/low-precision share of kernel time below which AMP is the first compute fix.
LOW_PRECISION_SHARE_LOW = 0.30

BOTTLENECKS = ("input_pipeline", "host_to_device", "cpu_launch_overhead", "sync", "gpu_compute",
               "memory", "cpu_compute")


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value == value and abs(value) != float("inf") else None
    return None


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, Mapping):
        return dict(result)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _evidence(result: dict[str, Any], device: str, memory_limit_gb: float) -> dict[str, Any]:
    """The named numbers every verdict is read from (None where not measured).

    Shares are 0-1 of the measured step; *_pct are 0-100."""
    timers, trace, step_ms = (_mapping(result.get(k)) for k in ("timers", "trace", "step_ms"))
    wall = _num(trace.get("wall_ms_per_step"))

    def trace_share(key: str) -> float | None:
        v = _num(trace.get(key))
        return round(v / wall, 4) if v is not None and wall else None

    data_wait = _num(timers.get("data_wait"))
    if data_wait is None:
        data_wait = trace_share("data_ms_per_step")
    h2d = _num(timers.get("h2d"))
    if h2d is None:
        h2d = trace_share("h2d_ms_per_step")
    syncs = _num(trace.get("syncs_per_step"))
    copy_syncs = _num(trace.get("copy_syncs_per_step")) or 0.0
    peak = _num(result.get("peak_memory_gb"))
    limit = _num(memory_limit_gb)
    return {
        "device": device,
        "samples_per_sec": _num(result.get("samples_per_sec")),
        "step_ms": _num(step_ms.get("median")) or _num(timers.get("step_ms")),
        "data_wait_share": data_wait,
        "h2d_share": h2d,
        "compute_share": _num(timers.get("compute")),
        "page_faults_per_step": _num(timers.get("page_faults_per_step")),
        "loader_cpu_share": _num(timers.get("loader_cpu_share")),
        "optimizer_share": _num(timers.get("optimizer")),
        "epoch_starts": _num(timers.get("epoch_starts")),
        "epoch_start_share": _num(timers.get("epoch_start_share")),
        "gpu_busy_pct": _num(trace.get("gpu_busy_pct")),
        "kernels_per_step": _num(trace.get("kernels_per_step")),
        "launches_per_step": _num(trace.get("launches_per_step")),
        "kernel_median_us": _num(trace.get("kernel_median_us")),
        "short_kernel_share": _num(trace.get("short_kernel_share")),
        "syncs_per_step": syncs,
        "step_syncs_per_step": max(0.0, syncs - copy_syncs) if syncs is not None else None,
        "sync_share": trace_share("sync_ms_per_step"),
        "low_precision_share": _num(trace.get("low_precision_kernel_share")),
        "cpu_op_share": trace_share("cpu_op_ms_per_step"),
        "peak_memory_gb": peak,
        "memory_share_of_limit": round(peak / limit, 4) if peak and limit and limit > 0 else None,
        "trace": "error: " + str(trace["error"]) if trace.get("error") else
                 ("yes" if trace else "none"),
    }


class _Fixes:
    """An ordered list of knob fixes that skips values the trial already has."""

    def __init__(self, knobs: Mapping[str, Any]):
        self.knobs = knobs
        self.items: list[dict[str, Any]] = []

    def add(self, knob: str, value: Any, why: str, with_: Mapping[str, Any] | None = None,
            beyond_domain: bool = False) -> None:
        """``with_``: knobs that belong to this fix (e.g. channels_last with bf16: oneDNN and
        cuDNN reach their low-precision kernels in NHWC), applied together by the agent.
        ``beyond_domain``: the measurement justifies a value past the knob's default domain
        (more workers than cores for a loader that waits on I/O)."""
        if knob in self.knobs and self.knobs[knob] == value and type(self.knobs[knob]) is type(value):
            return
        if any(f["knob"] == knob and not f.get("with") for f in self.items):
            return
        fix: dict[str, Any] = {"knob": knob, "value": value, "why": why}
        extra = {k: v for k, v in (with_ or {}).items() if self.knobs.get(k) != v}
        if extra:
            fix["with"] = extra
        if beyond_domain:
            fix["beyond_domain"] = True
        self.items.append(fix)


def _int(knobs: Mapping[str, Any], name: str, default: int) -> int:
    v = knobs.get(name)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _more_workers(knobs: Mapping[str, Any]) -> int:
    return max(1, 2 * _int(knobs, "num_workers", 0))


def _workers_needed(knobs: Mapping[str, Any], data_wait: float | None) -> int:
    """Seed 003's split (loader wait vs the step's own time) turned into a worker count.

    With w workers and a share ``data_wait`` of the step spent waiting, one worker takes
    w / (1 - data_wait) step-computes to load a batch (w = 0, loading in the step's own
    process: data_wait / (1 - data_wait)); that many workers keep up. Without a usable share,
    double. The agent caps it at the domain's largest value (e.g. the usable cores)."""
    w = _int(knobs, "num_workers", 0)
    if data_wait is None or not 0 <= data_wait < 1:
        return _more_workers(knobs)
    need = (w if w > 0 else data_wait) / (1 - data_wait)
    return max(w + 1, math.ceil(need - 1e-9))


def _more_prefetch(knobs: Mapping[str, Any]) -> int | None:
    cur = _int(knobs, "prefetch_factor", 2)  # None (no workers) = DataLoader's default of 2
    return next((v for v in (2, 4, 8) if v > cur), None)


def _batch_room(ev: dict[str, Any]) -> bool:
    share = ev["memory_share_of_limit"]
    return share is None or share < BATCH_HEADROOM_SHARE


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _restarts(ev: dict[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Is most of the loader wait the workers' start-up at each epoch (not persistent)?"""
    share, wait = ev.get("epoch_start_share"), ev["data_wait_share"]
    return (_int(knobs, "num_workers", 0) > 0 and not knobs.get("persistent_workers")
            and bool(ev.get("epoch_starts")) and share is not None and bool(wait)
            and share >= EPOCH_START_SHARE_OF_WAIT * wait)


def _io_bound(ev: dict[str, Any]) -> bool:
    share = ev["loader_cpu_share"]
    return share is not None and share < IO_BOUND_CPU_SHARE


def _loader_kind(ev: dict[str, Any], knobs: Mapping[str, Any] | None = None) -> str:
    share = ev["loader_cpu_share"]
    if knobs is not None and _restarts(ev, knobs):
        return (f" (its workers are started anew at every epoch: {ev['epoch_starts']:.0f} "
                f"epoch start(s) in the window took {_pct(ev['epoch_start_share'])} of it)")
    if share is None:
        return ""
    what = "waits on I/O" if _io_bound(ev) else "computes"
    return f" (the loader {what}: its processes were on a CPU {_pct(share)} of the time)"


def _input_fixes(f: _Fixes, knobs: Mapping[str, Any], cuda: bool, ev: dict[str, Any]) -> None:
    if _restarts(ev, knobs):  # start-up is neither I/O nor loading: keep the workers
        f.add("persistent_workers", True, f"{ev['epoch_starts']:.0f} epoch start(s) in the "
              f"window took {_pct(ev['epoch_start_share'])} of it: without persistent workers "
              "every epoch shuts the workers down and starts (and re-pickles the dataset to) "
              "new ones")
    w = _workers_needed(knobs, ev["data_wait_share"])
    io = _io_bound(ev) and not _restarts(ev, knobs)
    waits = (f"; its processes were on a CPU only {_pct(ev['loader_cpu_share'])} of the time, "
             "waiting on I/O, so workers beyond the core count still add throughput") if io else ""
    # New workers come with persistent_workers: without it every epoch start respawns them.
    f.add("num_workers", w, f"the step waits on the loader {_pct(ev['data_wait_share'])} of the "
          f"time: {w} worker process(es) load batches as fast as the step uses them, in "
          f"parallel with it, kept alive across epochs{waits}",
          with_={"persistent_workers": True}, beyond_domain=io)
    _device_stages_fix(f, "the loader runs every input stage on each sample; on the "
                       "device they run once per batch, after the copy")
    f.add("persistent_workers", True, "keep workers alive across epochs instead of respawning "
          "them (and re-pickling the dataset) at every epoch start")
    pf = _more_prefetch(knobs)
    if pf is not None:
        f.add("prefetch_factor", pf, f"each worker keeps {pf} batches ready, absorbing slow items")
    if cuda:
        f.add("pin_memory", True, "page-locked batches: faster copies that can overlap compute")
        f.add("transfer_dtype", "uint8", "ship raw uint8 and normalize on the GPU: less host "
              "work per item in the loader and 4x fewer bytes to copy")


def _copy_fixes(f: _Fixes, ev: dict[str, Any]) -> None:
    f.add("pin_memory", True, "pageable host memory is staged through a bounce buffer and blocks "
          "the host; pinned memory copies faster and asynchronously")
    f.add("non_blocking", True, "asynchronous copies (with pinned memory) overlap the next "
          "batch's transfer with compute")
    f.add("transfer_dtype", "uint8", "copy uint8 and convert/normalize on the GPU: 4x fewer "
          "bytes over the bus")
    _device_stages_fix(f, "copy the input before its resize and float conversion: "
                       "fewer bytes over the bus")


def _device_stages_fix(f: _Fixes, why: str) -> None:
    """transform_split=0: every input stage that has a batched version runs on the device
    (the agent keeps the host-only stages on the host: the nearest valid split)."""
    if _int(f.knobs, "transform_split", 0) > 0:
        f.add("transform_split", 0, why)


def _compute_fixes(f: _Fixes, knobs: Mapping[str, Any], ev: dict[str, Any],
                   image_inputs: bool | None) -> None:
    _optimizer_fixes(f, ev)
    lp = ev["low_precision_share"]
    lp_txt = f" (only {_pct(lp)} of kernel time is fp16/bf16/tensor-core)" if lp is not None else ""
    if knobs.get("amp", "off") == "off":
        f.add("amp", "bf16", "mixed precision runs matmuls/convolutions on tensor cores and "
              f"halves activation traffic{lp_txt}",
              with_={"channels_last": True} if image_inputs is not False else None)
    if image_inputs is not False:
        f.add("channels_last", True, "NHWC lets cuDNN pick tensor-core convolution kernels "
              "without layout transposes (4-D image inputs only)")
    f.add("tf32", True, "fp32 matmuls/convolutions that stay in fp32 use TF32 tensor cores")
    f.add("compile", "default", "torch.compile fuses elementwise kernels, cutting memory traffic")
    if _batch_room(ev):
        b = _int(knobs, "batch_size", 0)
        if b:
            f.add("batch_size", 2 * b, f"peak memory is {_pct(ev['memory_share_of_limit'])} of the "
                  "limit: a bigger batch uses the idle memory and larger, more efficient kernels "
                  "(changes training dynamics)")


def diagnose(result: Any, knobs: Mapping[str, Any], device: str, memory_limit_gb: float, *,
             image_inputs: bool | None = None) -> dict[str, Any]:
    """Name the trial's bottleneck and the knob values most likely to relieve it.

    ``result``: the WindowResult (or its dict); ``knobs``: the trial's full knob assignment;
    ``device``: "cuda" or "cpu"; ``memory_limit_gb``: the study's memory limit (GPU memory on
    CUDA, host RAM on CPU). ``image_inputs=False`` drops channels_last from the fixes (None:
    unknown, the caller's domain check decides)."""
    res = _as_dict(result)
    knobs = knobs or {}
    cuda = str(device).startswith("cuda")
    ev = _evidence(res, "cuda" if cuda else "cpu", memory_limit_gb)
    f = _Fixes(knobs)
    if cuda:
        bottleneck, rule, summary = _diagnose_cuda(ev, knobs, f, image_inputs)
    else:
        bottleneck, rule, summary = _diagnose_cpu(ev, knobs, f, image_inputs)
    return {"bottleneck": bottleneck, "evidence": ev, "rule": rule, "fixes": f.items,
            "summary": summary}


def _memory(ev: dict[str, Any], knobs: Mapping[str, Any], f: _Fixes, cuda: bool) -> tuple[str, str, str]:
    share = ev["memory_share_of_limit"]
    if knobs.get("amp", "off") == "off":
        f.add("amp", "bf16", "16-bit activations roughly halve activation memory (and run "
              "faster)")
    b = _int(knobs, "batch_size", 0)
    if b > 1:
        f.add("batch_size", max(1, b // 2), "halve the batch to get back below the limit "
              "(changes training dynamics)")
    f.add("set_to_none", True, "free gradients between steps instead of zeroing them in place")
    where = "GPU memory" if cuda else "host memory"
    return ("memory", f"memory_share_of_limit {share:.2f} >= {MEMORY_HIGH_SHARE}",
            f"Memory-bound: peak {where} is {_pct(share)} of the limit, leaving no headroom "
            f"(allocator retries, OOM risk); reduce activation memory with {_first(f)}.")


def _first(f: _Fixes) -> str:
    if not f.items:
        return "no knob change"
    return ", ".join(f"{x['knob']}={x['value']}" for x in f.items[:2])


def _diagnose_cuda(ev: dict[str, Any], knobs: Mapping[str, Any], f: _Fixes,
                   image_inputs: bool | None) -> tuple[str, str, str]:
    busy = ev["gpu_busy_pct"]
    not_saturated = busy is None or busy < GPU_BUSY_HIGH_PCT
    busy_txt = f"GPU busy {busy:.0f}%" if busy is not None else "no GPU trace"
    dw, h2d = ev["data_wait_share"], ev["h2d_share"]

    if dw is not None and dw >= DATA_WAIT_SHARE and not_saturated:
        _input_fixes(f, knobs, True, ev)
        return ("input_pipeline", f"data_wait_share {dw:.2f} >= {DATA_WAIT_SHARE} and {busy_txt}",
                f"Input-bound: the step waits on the DataLoader {_pct(dw)} of the time while the "
                f"GPU idles ({busy_txt}){_loader_kind(ev, knobs)}; feed it faster with {_first(f)}.")

    if h2d is not None and h2d >= H2D_SHARE and not_saturated:
        _copy_fixes(f, ev)
        return ("host_to_device", f"h2d_share {h2d:.2f} >= {H2D_SHARE}",
                f"Copy-bound: host-to-device copies take {_pct(h2d)} of the step ({busy_txt}); "
                f"make them cheaper and asynchronous with {_first(f)}.")

    syncs = ev["step_syncs_per_step"]
    if syncs is not None and syncs >= SYNCS_PER_STEP and not_saturated:
        if knobs.get("amp") == "fp16":
            f.add("amp", "bf16", "fp16's GradScaler reads found-inf on the host every step; bf16 "
                  "needs no scaler")
        if _batch_room(ev):
            b = _int(knobs, "batch_size", 0)
            if b:
                f.add("batch_size", 2 * b, "the syncs are per step: a bigger batch spreads their "
                      "cost over more samples (softens, does not fix)")
        return ("sync", f"step_syncs_per_step {syncs:.1f} >= {SYNCS_PER_STEP} and {busy_txt}",
                f"Sync-bound: {syncs:.0f} host-device synchronizations per step (.item(), .cpu(), "
                f"float(t), print of a tensor, data-dependent control flow) stall the host and "
                f"idle the GPU ({busy_txt}); the fix is in the training code (remove them, or "
                f"log every N steps); knobs can only soften it.")

    launches = ev["launches_per_step"] if ev["launches_per_step"] is not None else ev["kernels_per_step"]
    short = ev["short_kernel_share"]
    median = ev["kernel_median_us"]
    tiny = (short is not None and short >= SHORT_KERNEL_SHARE) or (
        median is not None and median < SHORT_KERNEL_US)
    starved = busy is not None and busy < GPU_STARVED_PCT
    if starved and tiny and launches is not None and launches >= MIN_LAUNCHES_PER_STEP:
        _launch_fixes(f, knobs, ev)
        return ("cpu_launch_overhead",
                f"gpu_busy_pct {busy:.0f} < {GPU_STARVED_PCT}, short kernels "
                f"({_pct(short)} < {SHORT_KERNEL_US:.0f} us), {launches:.0f} launches/step",
                f"Launch-bound: {launches:.0f} mostly tiny kernels per step (median "
                f"{median if median is not None else float('nan'):.1f} us) leave the GPU idle "
                f"({busy_txt}) while the host enqueues them; cut launches with {_first(f)}.")

    share = ev["memory_share_of_limit"]
    if share is not None and share >= MEMORY_HIGH_SHARE:
        return _memory(ev, knobs, f, True)

    if busy is not None and busy >= GPU_BUSY_HIGH_PCT:
        _compute_fixes(f, knobs, ev, image_inputs)
        return ("gpu_compute", f"gpu_busy_pct {busy:.0f} >= {GPU_BUSY_HIGH_PCT}",
                f"Compute-bound: the GPU is busy {busy:.0f}% of the step; make each step "
                f"cheaper with {_first(f)}.")

    if busy is not None:  # idle GPU, not data, copies or syncs: host-side overhead
        _launch_fixes(f, knobs, ev)
        return ("cpu_launch_overhead", f"gpu_busy_pct {busy:.0f} < {GPU_BUSY_HIGH_PCT} with no "
                "data, copy or sync cause",
                f"Host-bound: the GPU idles ({busy_txt}) without waiting on data, copies or syncs: "
                f"Python/launch overhead on the host; try {_first(f)}.")

    _compute_fixes(f, knobs, ev, image_inputs)
    return ("gpu_compute", "no profiler trace and no input/copy cause: assumed compute-bound",
            f"Probably compute-bound (no profiler trace to confirm; loader wait {_pct(dw)}, "
            f"copies {_pct(h2d)}); try {_first(f)}.")


def _optimizer_fixes(f: _Fixes, ev: dict[str, Any]) -> None:
    """Per-parameter optimizer work (AdamW on a transformer: a few ops per parameter tensor)
    is fixed by the optimizer's implementation, not by the training code or the batch."""
    share = ev["optimizer_share"]
    if share is not None and share >= OPTIMIZER_SHARE:
        f.add("optimizer_impl", "fused", f"the optimizer takes {_pct(share)} of the step, "
              "mostly per-parameter work: the fused implementation updates all parameters in "
              "one kernel")
        f.add("compile", "default", "torch.compile fuses the optimizer's per-parameter ops too")


def _launch_fixes(f: _Fixes, knobs: Mapping[str, Any], ev: dict[str, Any]) -> None:
    _optimizer_fixes(f, ev)
    graphs_ok = knobs.get("compile", "off") == "off" and knobs.get("amp") != "fp16"
    if graphs_ok:
        f.add("cuda_graphs", True, "replay the whole captured step with one launch instead of "
              "one per kernel")
    f.add("compile", "reduce-overhead", "compiled, fused kernels replayed as CUDA Graphs: fewer "
          "and cheaper launches")
    if _batch_room(ev):
        b = _int(knobs, "batch_size", 0)
        if b:
            f.add("batch_size", 2 * b, "same number of launches for twice the work per step "
                  "(changes training dynamics)")
    f.add("optimizer_impl", "fused", "one fused optimizer kernel instead of several per "
          "parameter")


def _diagnose_cpu(ev: dict[str, Any], knobs: Mapping[str, Any], f: _Fixes,
                  image_inputs: bool | None) -> tuple[str, str, str]:
    dw = ev["data_wait_share"]
    if dw is not None and dw >= DATA_WAIT_SHARE:
        _input_fixes(f, knobs, False, ev)
        return ("input_pipeline", f"data_wait_share {dw:.2f} >= {DATA_WAIT_SHARE}",
                f"Input-bound: the step waits on the DataLoader {_pct(dw)} of the time"
                f"{_loader_kind(ev, knobs)}; load batches in parallel with {_first(f)}.")
    share = ev["memory_share_of_limit"]
    if share is not None and share >= MEMORY_HIGH_SHARE:
        return _memory(ev, knobs, f, False)
    images = image_inputs is not False
    # Precision and layout first: they leave the training dynamics (nearly) alone; a bigger
    # batch does not. The amp domain on CPU is bf16 only where the CPU has native bf16.
    if knobs.get("amp", "off") == "off":
        f.add("amp", "bf16", "bf16 autocast runs convolutions/matmuls on the CPU's native bf16 "
              "units (AVX512-BF16/AMX)" + (", best reached in NHWC" if images else ""),
              with_={"channels_last": True} if images else None)
    if images:
        f.add("channels_last", True, "oneDNN convolutions prefer NHWC (4-D image inputs only)")
    faults = ev["page_faults_per_step"]
    if faults is not None and faults >= PAGE_FAULTS_PER_STEP:
        f.add("host_allocator", "retain", f"{faults:,.0f} page faults per step: the allocator "
              "unmaps the step's freed tensors and the kernel maps and zeroes them again next "
              "step; retaining freed memory removes that work")
    _optimizer_fixes(f, ev)
    if _batch_room(ev):
        b = _int(knobs, "batch_size", 0)
        if b:
            f.add("batch_size", 2 * b, "bigger matrix products use the cores' vector units better "
                  "and amortize per-op overhead (changes training dynamics)")
    if dw is not None and dw >= DATA_WAIT_NOTABLE:
        f.add("num_workers", _more_workers(knobs), f"the loader still takes {_pct(dw)} of the "
              "step: overlap it with compute")
    return ("cpu_compute", f"data_wait_share {_pct(dw)} < {DATA_WAIT_SHARE:.0%}: the CPU computes",
            f"Compute-bound on CPU: the loader wait is only {_pct(dw)} of the step and the "
            f"cores spend it in the model's ops; try {_first(f)}.")
