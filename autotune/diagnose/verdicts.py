"""PARENT side: from one trial's measurements to a named bottleneck and knob fixes.

Pure functions over plain data (the WindowResult as a dict, its ``trace`` summary from
``autotune/measure/profiling.py``, the trial's knobs): no torch, no CUDA, so the driver can call it.

``diagnose(result, knobs, device, memory_limit_gb)`` returns::

    {"bottleneck": "input_pipeline" | "host_to_device" | "cpu_launch_overhead" | "sync"
                   | "gpu_compute" | "memory" | "cpu_compute",
     "evidence": {named numbers, see evidence.evidence()},
     "rule": "the test that fired, with its numbers",
     "fixes": [{"knob": name, "value": v, "why": "..."}, ...],   # most promising first
     "summary": "one sentence"}

Fixes only name knob values that differ from the trial's; whether a value is valid on this
device / workload (and whether it is active given the other knobs) is the caller's check.

The rules encode the symptom -> cause -> fix tables of GPU-profiling guides (e.g. PyTorch's
performance tuning guide, https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html),
checked in this order on CUDA (first match wins):

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
... and with workers, the         input_pipeline          num_workers=0 (no transfer), a bigger
training process busy >=                                  batch (fewer transfers a sample)
RECEIVE_SHARE of its wait
(receiving their batches)
epoch starts cost >=              input_pipeline          persistent_workers (the workers are
EPOCH_START_COST_SHARE of the                             shut down and started anew at every
window, workers not persistent                            epoch; on few cores their start-up
                                                          slows the steps, not the wait)
copies take >= H2D_SHARE          host_to_device          pin_memory, non_blocking,
                                                          transfer_dtype=uint8, transform_split=0
>= SYNCS_PER_STEP host-device     sync                    user code (.item(), .cpu(), print of
syncs outside the input copy,                             a tensor): none by knob; amp bf16
GPU not saturated                                         instead of fp16 (GradScaler syncs),
                                                          a bigger batch dilutes them
GPU busy < GPU_STARVED_PCT,       cpu_launch_overhead     cuda_graphs, compile reduce-overhead,
mostly short kernels, many                                bigger batch, fused/foreach optimizer
launches per step
peak memory >= MEMORY_HIGH_SHARE  memory                  amp bf16, smaller batch, set_to_none,
of the limit                                              activation_checkpointing
GPU busy >= GPU_BUSY_HIGH_PCT     gpu_compute             amp bf16, channels_last (images),
                                                          tf32, compile, bigger batch
DDP's all-reduce adds >=          communication           accumulation_no_sync (accumulating),
COMM_EXPOSED_SHARE of the step                            gradient_as_bucket_view, bucket_cap_mb,
(several ranks; checked first)                            static_graph, bigger per-rank batch,
                                                          batched_grad_copy, comm_hook (listed)
padding >= PADDING_SHARE of the   (any; said first)       padding_free, length_grouping (where
tokens computed                                           the user listed them; else named)
none of the above, GPU idle       cpu_launch_overhead     (host-side Python/launch overhead)
none of the above, no trace       gpu_compute             (assumed; no profiler evidence)
================================  ======================  =====================================

On CPU: input_pipeline (the same two tests), then memory, else cpu_compute (more threads where
the study's domain allows them, bf16 autocast with channels_last for images, channels_last,
host_allocator=retain when the step faults in more than PAGE_FAULTS_PER_STEP pages, a bigger
batch, and one more worker only when the loader wait is still notable).
A bigger batch is only suggested while peak memory is below BATCH_HEADROOM_SHARE of the limit.

The thresholds, with their sources, are in ``autotune/diagnose/thresholds.py``; the fixes each rule
proposes, in ``autotune/diagnose/fixes.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.diagnose.comm_verdict import communication
from autotune.diagnose.evidence import LOADER_KEYS, as_dict, evidence, mapping
from autotune.diagnose.fixes import (
    Fixes,
    bigger_batch,
    compute_fixes,
    copy_fixes,
    first_fixes,
    input_fixes,
    int_knob,
    launch_fixes,
    loader_kind,
    more_workers,
    optimizer_fixes,
    pct,
    receive_bound,
    receive_fixes,
    restart_verdict,
    thread_fixes,
)
from autotune.diagnose.phases import also_large
from autotune.diagnose.thresholds import (
    COMM_EXPOSED_SHARE,
    DATA_WAIT_NOTABLE,
    DATA_WAIT_SHARE,
    GPU_BUSY_HIGH_PCT,
    GPU_STARVED_PCT,
    H2D_SHARE,
    MEMORY_HIGH_SHARE,
    MIN_LAUNCHES_PER_STEP,
    PADDING_SHARE,
    PAGE_FAULTS_PER_STEP,
    SHORT_KERNEL_SHARE,
    SHORT_KERNEL_US,
    SYNCS_PER_STEP,
)

BOTTLENECKS = ("input_pipeline", "host_to_device", "cpu_launch_overhead", "sync", "gpu_compute",
               "memory", "cpu_compute", "communication")


def _hot_spot(ev: Mapping[str, Any]) -> str:
    """" The loader's own time: 61% JPEG decode (...) in path:line, 18% RandomResizedCrop;
    the dataset's __getitem__ is path:line." ("" without a profile)."""
    frames = ev.get("loader_frames") or []
    if not frames:
        return ""
    first = frames[0]
    parts = [f"{pct(first['share'])} {first['name']} ({first['where']})"]
    parts += [f"{pct(f['share'])} {f['name']}" for f in frames[1:] if (f["share"] or 0) >= 0.05]
    where = f"; the dataset's __getitem__ is {ev['loader_getitem']}" if ev.get("loader_getitem") else ""
    return f" The loader's own time (a profiled pass): {', '.join(parts)}{where}."


def diagnose(result: Any, knobs: Mapping[str, Any], device: str, memory_limit_gb: float, *,
             image_inputs: bool | None = None,
             domains: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Name the trial's bottleneck and the knob values most likely to relieve it.

    ``result``: the WindowResult (or its dict); ``knobs``: the trial's full knob assignment;
    ``device``: "cuda" or "cpu"; ``memory_limit_gb``: the study's memory limit (GPU memory on
    CUDA, host RAM on CPU). ``image_inputs=False`` drops channels_last from the fixes (None:
    unknown, the caller's domain check decides). ``domains`` (the study's ``Space.domains``):
    fixes outside them are not offered; the verdict names them with the space's reason
    (``ruled_out``), so advice never points where the study cannot go."""
    res = as_dict(result)
    knobs = knobs or {}
    cuda = str(device).startswith("cuda")
    ev = evidence(res, "cuda" if cuda else "cpu", memory_limit_gb)
    f = Fixes(knobs, domains)
    comm = mapping(res.get("comm"))
    if comm:
        ev["comm_exposed_share"] = comm.get("exposed_share")
        ev["comm_exposed_ms"] = comm.get("exposed_ms")
        # The verdict reads the share's lower bound (measure/comm.py), the median where a
        # result has none (older studies, hand-made evidence).
        ev["comm_exposed_share_low"] = comm.get("exposed_share_low", comm.get("exposed_share"))
        for key in ("all_gathers", "all_gather_ms", "reduce_scatters", "reduce_scatter_ms"):
            if comm.get(key) is not None:  # a sharded trial's collectives (measure/shard_comm.py)
                ev[f"comm_{key}"] = comm[key]
    if comm and float(ev["comm_exposed_share_low"] or 0.0) >= COMM_EXPOSED_SHARE:
        bottleneck, rule, summary = communication(ev, knobs, f)
    elif cuda:
        bottleneck, rule, summary = _diagnose_cuda(ev, knobs, f, image_inputs)
    else:
        bottleneck, rule, summary = _diagnose_cpu(ev, knobs, f, image_inputs)
    summary += also_large(ev, knobs, f, bottleneck)
    padding = res.get("padding_share")
    if padding is not None:
        ev["padding_share"] = padding
        if float(padding) >= PADDING_SHARE:
            summary = _padding(float(padding), f) + " " + summary
    if f.ruled_out:
        summary += " Not on offer here: " + "; ".join(
            f"{r['knob']}={r['value']} ({r['why']})" for r in f.ruled_out) + "."
    loader = {k: ev.pop(k) for k in LOADER_KEYS}  # structured, beside the numbers
    return {"bottleneck": bottleneck, "evidence": ev, "rule": rule, "fixes": f.items,
            "ruled_out": f.ruled_out, "loader_hot": loader["loader_hot"], "summary": summary}


def _padding(share: float, f: Fixes) -> str:
    """Seed-independent, from Transformers' guide: padding tokens are computed and thrown away;
    grouping similar lengths or packing without padding removes them. Offered first, where
    the user allowed them (they change which samples share a batch); otherwise named with how
    to allow them."""
    later, f.items = f.items, []  # the padding fixes go first: they remove work
    f.add("padding_free", True, "pack each batch's samples into one row: no padding computed")
    f.add("length_grouping", True, "batch samples of similar length: less padding per batch")
    f.items += later
    return f"{pct(share)} of the tokens computed are padding."


def _memory(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes, cuda: bool) -> tuple[str, str, str]:
    share = ev["memory_share_of_limit"]
    shard_fixes(f, knobs, cuda)
    if knobs.get("amp", "off") == "off":
        f.add("amp", "bf16", "16-bit activations roughly halve activation memory (and run "
              "faster)")
    b = int_knob(knobs, "batch_size", 0)
    if b > 1:
        f.add("batch_size", max(1, b // 2), "halve the batch to get back below the limit "
              "(changes training dynamics)")
    f.add("set_to_none", True, "free gradients between steps instead of zeroing them in place")
    f.add("activation_checkpointing", True, "recompute each layer's activations in backward "
          "instead of keeping them: slower steps, room for a bigger batch")
    where = "GPU memory" if cuda else "host memory"
    return ("memory", f"memory_share_of_limit {share:.2f} >= {MEMORY_HIGH_SHARE}",
            f"Memory-bound: peak {where} is {pct(share)} of the limit, leaving no headroom "
            f"(allocator retries, OOM risk); reduce activation memory with {first_fixes(f)}.")


def shard_fixes(f: Fixes, knobs: Mapping[str, Any], cuda: bool) -> None:
    """Ranks over their memory: shard what each holds, where the study searches sharding.
    On the CPU a rank's resident memory shrinks with sharding only where freed blocks go back
    to the OS (host_allocator=release: core/host.py), so the two go together there."""
    dom = (f.domains or {}).get("sharding")
    if dom is None or "full_shard" not in dom.values:
        return
    release = None if cuda else {"host_allocator": "release"}
    if knobs.get("sharding", "no_shard") != "full_shard":
        f.add("sharding", "full_shard", "each rank holds a shard of the parameters, gradients "
              "and optimizer state, and each block's whole parameters only while it computes",
              with_=release)
    elif release and knobs.get("host_allocator") != "release":
        f.add("host_allocator", "release", "the gathered parameters a sharded rank frees go "
              "back to the OS instead of staying resident")


def _diagnose_cuda(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes,
                   image_inputs: bool | None) -> tuple[str, str, str]:
    busy = ev["gpu_busy_pct"]
    not_saturated = busy is None or busy < GPU_BUSY_HIGH_PCT
    busy_txt = f"GPU busy {busy:.0f}%" if busy is not None else "no GPU trace"
    dw, h2d = ev["data_wait_share"], ev["h2d_share"]

    if dw is not None and dw >= DATA_WAIT_SHARE and not_saturated:
        input_fixes(f, knobs, True, ev)
        return ("input_pipeline", f"data_wait_share {dw:.2f} >= {DATA_WAIT_SHARE} and {busy_txt}",
                f"Input-bound: the step waits on the DataLoader {pct(dw)} of the time while the "
                f"GPU idles ({busy_txt}){loader_kind(ev, knobs)}; feed it faster with {first_fixes(f)}."
                + _hot_spot(ev))
    restarted = restart_verdict(f, ev, knobs)
    if restarted is not None:
        return restarted

    if h2d is not None and h2d >= H2D_SHARE and not_saturated:
        copy_fixes(f, ev)
        return ("host_to_device", f"h2d_share {h2d:.2f} >= {H2D_SHARE}",
                f"Copy-bound: host-to-device copies take {pct(h2d)} of the step ({busy_txt}); "
                f"make them cheaper and asynchronous with {first_fixes(f)}.")

    synced = _cuda_sync(ev, knobs, f, busy_txt) if not_saturated else None
    if synced is not None:
        return synced

    launches = ev["launches_per_step"] if ev["launches_per_step"] is not None else ev["kernels_per_step"]
    short = ev["short_kernel_share"]
    median = ev["kernel_median_us"]
    tiny = (short is not None and short >= SHORT_KERNEL_SHARE) or (
        median is not None and median < SHORT_KERNEL_US)
    starved = busy is not None and busy < GPU_STARVED_PCT
    if starved and tiny and launches is not None and launches >= MIN_LAUNCHES_PER_STEP:
        launch_fixes(f, knobs, ev)
        return ("cpu_launch_overhead",
                f"gpu_busy_pct {busy:.0f} < {GPU_STARVED_PCT}, short kernels "
                f"({pct(short)} < {SHORT_KERNEL_US:.0f} us), {launches:.0f} launches/step",
                f"Launch-bound: {launches:.0f} mostly tiny kernels per step (median "
                f"{median if median is not None else float('nan'):.1f} us) leave the GPU idle "
                f"({busy_txt}) while the host enqueues them; cut launches with {first_fixes(f)}.")

    share = ev["memory_share_of_limit"]
    if share is not None and share >= MEMORY_HIGH_SHARE:
        return _memory(ev, knobs, f, True)

    if busy is not None and busy >= GPU_BUSY_HIGH_PCT:
        compute_fixes(f, knobs, ev, image_inputs)
        return ("gpu_compute", f"gpu_busy_pct {busy:.0f} >= {GPU_BUSY_HIGH_PCT}",
                f"Compute-bound: the GPU is busy {busy:.0f}% of the step; make each step "
                f"cheaper with {first_fixes(f)}.")

    if busy is not None:  # idle GPU, not data, copies or syncs: host-side overhead
        launch_fixes(f, knobs, ev)
        return ("cpu_launch_overhead", f"gpu_busy_pct {busy:.0f} < {GPU_BUSY_HIGH_PCT} with no "
                "data, copy or sync cause",
                f"Host-bound: the GPU idles ({busy_txt}) without waiting on data, copies or syncs: "
                f"Python/launch overhead on the host; try {first_fixes(f)}.")

    compute_fixes(f, knobs, ev, image_inputs)
    return ("gpu_compute", "no profiler trace and no input/copy cause: assumed compute-bound",
            f"Probably compute-bound (no profiler trace to confirm; loader wait {pct(dw)}, "
            f"copies {pct(h2d)}); try {first_fixes(f)}.")


def _cuda_sync(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes,
               busy_txt: str) -> tuple[str, str, str] | None:
    """Syncs that idle an unsaturated GPU: in the input stages run on the device (a knob moves
    them), or in the training step itself (the fix is in the user's code)."""
    stage_syncs = ev["stage_syncs_per_step"]
    if stage_syncs >= SYNCS_PER_STEP:
        split = int(knobs.get("transform_split") or 0)
        f.add("transform_split", split + 1, "runs the first device stage on the host, in the "
              "loader (with workers to run it), where it needs no synchronization")
        return ("sync", f"stage_syncs_per_step {stage_syncs:.1f} >= {SYNCS_PER_STEP} and {busy_txt}",
                f"Sync-bound in the input stages on the device: {stage_syncs:.0f} host-device "
                f"synchronizations per step happen in the stages transform_split={split} runs on "
                f"the device (decode_jpeg on a GPU copies each image's host bytes in with a "
                f"blocking copy), not in the training code, and idle the GPU ({busy_txt}); "
                f"try {first_fixes(f)}.")

    syncs = ev["step_syncs_per_step"]
    if syncs is not None and syncs >= SYNCS_PER_STEP:
        if knobs.get("amp") == "fp16":
            f.add("amp", "bf16", "fp16's GradScaler reads found-inf on the host every step; bf16 "
                  "needs no scaler")
        bigger_batch(f, knobs, ev, "the syncs are per step: a bigger batch spreads their cost "
                     "over more samples (softens, does not fix)")
        return ("sync", f"step_syncs_per_step {syncs:.1f} >= {SYNCS_PER_STEP} and {busy_txt}",
                f"Sync-bound: {syncs:.0f} host-device synchronizations per step (.item(), .cpu(), "
                f"float(t), print of a tensor, data-dependent control flow) stall the host and "
                f"idle the GPU ({busy_txt}); the fix is in the training code (remove them, or "
                f"log every N steps); knobs can only soften it.")
    return None


def _diagnose_cpu(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes,
                  image_inputs: bool | None) -> tuple[str, str, str]:
    dw = ev["data_wait_share"]
    if dw is not None and dw >= DATA_WAIT_SHARE:
        input_fixes(f, knobs, False, ev)
        how = "try" if receive_bound(ev, knobs) else "load batches in parallel with"
        return ("input_pipeline", f"data_wait_share {dw:.2f} >= {DATA_WAIT_SHARE}",
                f"Input-bound: the step waits on the DataLoader {pct(dw)} of the time"
                f"{loader_kind(ev, knobs)}; {how} {first_fixes(f)}." + _hot_spot(ev))
    restarted = restart_verdict(f, ev, knobs)
    if restarted is not None:
        return restarted
    share = ev["memory_share_of_limit"]
    if share is not None and share >= MEMORY_HIGH_SHARE:
        return _memory(ev, knobs, f, False)
    images = image_inputs is not False
    # Threads, precision and layout first: they leave the training dynamics (nearly) alone; a
    # bigger batch does not. The amp domain on CPU is bf16 only where the CPU has native bf16.
    thread_fixes(f, knobs)
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
    optimizer_fixes(f, ev)
    bigger_batch(f, knobs, ev, "bigger matrix products use the cores' vector units better and "
                 "amortize per-op overhead (changes training dynamics)")
    if dw is not None and dw >= DATA_WAIT_NOTABLE and receive_bound(ev, knobs):
        receive_fixes(f, knobs, ev)
    elif dw is not None and dw >= DATA_WAIT_NOTABLE:
        f.add("num_workers", more_workers(knobs), f"the loader still takes {pct(dw)} of the "
              "step: overlap it with compute")
    return ("cpu_compute", f"data_wait_share {pct(dw)} < {DATA_WAIT_SHARE:.0%}: the CPU computes",
            f"Compute-bound on CPU: the loader wait is only {pct(dw)} of the step and the "
            f"cores spend it in the model's ops; try {first_fixes(f)}.")
