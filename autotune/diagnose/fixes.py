"""What to try for each bottleneck: the knob values most likely to relieve it, and why.

Called by the rules in ``autotune/diagnose/verdicts.py`` once they have named the bottleneck; each
builder appends to one ordered ``Fixes`` list (most promising first) and skips values the trial
already has. Pure functions over the evidence dict: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.diagnose.thresholds import (
    BATCH_HEADROOM_SHARE,
    EPOCH_START_COST_SHARE,
    EPOCH_START_SHARE_OF_WAIT,
    IO_BOUND_CPU_SHARE,
    OPTIMIZER_SHARE,
    RECEIVE_SHARE,
)


class Fixes:
    """An ordered list of knob fixes that skips values the trial already has, and values the
    study's search space rules out (those are kept apart, with the space's reason, so the
    verdict can say why the textbook fix is not on offer here)."""

    def __init__(self, knobs: Mapping[str, Any], domains: Mapping[str, Any] | None = None):
        self.knobs = knobs
        self.domains = domains  # knob -> its Domain here (values, reason); None: unknown
        self.items: list[dict[str, Any]] = []
        self.ruled_out: list[dict[str, Any]] = []

    def _outside(self, knob: str, value: Any) -> str | None:
        """Why ``value`` is outside the knob's domain here (None: inside, or unknown)."""
        dom = (self.domains or {}).get(knob)
        if dom is None or value in dom.values:
            return None
        return dom.reason or f"the study searches {knob} over {dom.values} only"

    def _capped(self, knob: str, value: Any) -> tuple[Any, str]:
        """An integer fix past the domain (6 workers on 2 cores) becomes the domain's nearest
        value in the same direction, as the agent applies it; the why says so. Other values
        are returned as they are."""
        dom = (self.domains or {}).get(knob)
        current = self.knobs.get(knob)
        if (dom is None or value in dom.values or not _is_int(value) or not _is_int(current)
                or not all(_is_int(v) for v in dom.values)):
            return value, ""
        ahead = [v for v in dom.values if current < v <= value or value <= v < current]
        if not ahead:
            return value, ""
        cap = min(ahead, key=lambda v: abs(v - value))
        return cap, f" ({knob}={value} would; the study searches {knob} up to {cap} here)" \
            if cap < value else f" ({knob}={value} would; the nearest valid value here is {cap})"

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
        if not beyond_domain:
            value, note = self._capped(knob, value)
            why += note
        outside = None if beyond_domain else self._outside(knob, value)
        if outside is not None:
            if not any(r["knob"] == knob for r in self.ruled_out):
                self.ruled_out.append({"knob": knob, "value": value, "why": outside})
            return
        fix: dict[str, Any] = {"knob": knob, "value": value, "why": why}
        extra = {k: v for k, v in (with_ or {}).items()
                 if self.knobs.get(k) != v and self._outside(k, v) is None}
        if extra:
            fix["with"] = extra
        if beyond_domain:
            fix["beyond_domain"] = True
        self.items.append(fix)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def int_knob(knobs: Mapping[str, Any], name: str, default: int) -> int:
    v = knobs.get(name)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def more_workers(knobs: Mapping[str, Any]) -> int:
    return max(1, 2 * int_knob(knobs, "num_workers", 0))


def workers_needed(knobs: Mapping[str, Any], data_wait: float | None) -> int:
    """The loader-wait split (the wait for the next batch vs the step's own time) turned into a worker count.

    With w workers and a share ``data_wait`` of the step spent waiting, one worker takes
    w / (1 - data_wait) step-computes to load a batch (w = 0, loading in the step's own
    process: data_wait / (1 - data_wait)); that many workers keep up. Without a usable share,
    double. The agent caps it at the domain's largest value (e.g. the usable cores)."""
    w = int_knob(knobs, "num_workers", 0)
    if data_wait is None or not 0 <= data_wait < 1:
        return more_workers(knobs)
    need = (w if w > 0 else data_wait) / (1 - data_wait)
    return max(w + 1, math.ceil(need - 1e-9))


def thread_fixes(f: Fixes, knobs: Mapping[str, Any]) -> None:
    """A CPU step computed on fewer threads than the study may give it: the next count up.
    In a README study on this project's 2-core VM (2026-11-27) the two batch-128 trials on one
    thread ran 273-297 samples/s, the best on two ran 538 (other knobs differed too), and
    their verdicts had offered no knob. Only within the study's domain, which stops at the
    cores."""
    threads, dom = knobs.get("cpu_threads"), (f.domains or {}).get("cpu_threads")
    if dom is None or not _is_int(threads):
        return
    more = sorted(v for v in dom.values if _is_int(v) and v > threads)
    if more:
        f.add("cpu_threads", more[0], f"the step's ops run on {threads} thread(s) where the "
              f"study may give them up to {more[-1]}")


def more_prefetch(knobs: Mapping[str, Any]) -> int | None:
    cur = int_knob(knobs, "prefetch_factor", 2)  # None (no workers) = DataLoader's default of 2
    return next((v for v in (2, 4, 8) if v > cur), None)


def batch_room(ev: dict[str, Any]) -> bool:
    share = ev["memory_share_of_limit"]
    return share is None or share < BATCH_HEADROOM_SHARE


def bigger_batch(f: Fixes, knobs: Mapping[str, Any], ev: dict[str, Any], why: str) -> None:
    """Double the batch, while peak memory leaves room for it (BATCH_HEADROOM_SHARE)."""
    b = int_knob(knobs, "batch_size", 0)
    if b and batch_room(ev):
        f.add("batch_size", 2 * b, why)


def first_fixes(f: Fixes) -> str:
    """The first two fixes as ``knob=value``, for a verdict's sentence ("try ...", "feed it
    faster with ..."). Without one, words that read after any of those verbs: the README's CPU
    study once said "try no knob in this study's space" (2026-11-28)."""
    if not f.items:
        return "a knob outside this study's space (none in it addresses this)"
    return ", ".join(f"{x['knob']}={x['value']}" for x in f.items[:2])


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def restarts(ev: dict[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Is most of the loader wait the workers' start-up at each epoch (not persistent)?"""
    share, wait = ev.get("epoch_start_share"), ev["data_wait_share"]
    return (int_knob(knobs, "num_workers", 0) > 0 and not knobs.get("persistent_workers")
            and bool(ev.get("epoch_starts")) and share is not None and bool(wait)
            and share >= EPOCH_START_SHARE_OF_WAIT * wait)


def restart_verdict(f: Fixes, ev: dict[str, Any],
                    knobs: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """Non-persistent workers whose restarts at each epoch start cost the window a share worth
    naming, though the loader wait is small: on a machine with few cores the new workers'
    start-up slows the steps beside it rather than the wait for the first batch."""
    cost = ev.get("epoch_start_cost_share")
    if (int_knob(knobs, "num_workers", 0) == 0 or knobs.get("persistent_workers")
            or not ev.get("epoch_starts") or cost is None or cost < EPOCH_START_COST_SHARE):
        return None
    starts = f"{ev['epoch_starts']:.0f} epoch start(s)"
    f.add("persistent_workers", True, f"{starts} cost {pct(cost)} of the window: without "
          "persistent workers every epoch shuts the workers down and starts new ones")
    return ("input_pipeline", f"epoch_start_cost_share {cost:.2f} >= {EPOCH_START_COST_SHARE}",
            f"Input-bound at epoch starts: the loader wait is only {pct(ev['data_wait_share'])} "
            f"of the step, but the window's {starts} cost {pct(cost)} of it (each shuts the "
            "workers down and starts new ones, whose start-up and prefetch run beside the "
            f"steps that follow); keep them with {first_fixes(f)}.")


def io_bound(ev: dict[str, Any]) -> bool:
    share = ev["loader_cpu_share"]
    return share is not None and share < IO_BOUND_CPU_SHARE


def receive_bound(ev: dict[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Is the loader wait the training process taking the workers' batches off their queue
    (the workers ahead of it), rather than waiting for the workers?"""
    share = ev.get("loader_receive_share")
    return (share is not None and share >= RECEIVE_SHARE
            and int_knob(knobs, "num_workers", 0) > 0 and not restarts(ev, knobs))


def loader_kind(ev: dict[str, Any], knobs: Mapping[str, Any] | None = None) -> str:
    share = ev["loader_cpu_share"]
    if knobs is not None and restarts(ev, knobs):
        return (f" (its workers are started anew at every epoch: {ev['epoch_starts']:.0f} "
                f"epoch start(s) in the window took {pct(ev['epoch_start_share'])} of it)")
    if knobs is not None and receive_bound(ev, knobs):
        workers = f", while its workers were on a CPU {pct(share)} of the time" if share else ""
        return (f" (receiving the workers' batches: the training process was itself busy "
                f"{pct(ev['loader_receive_share'])} of that wait, unpickling each batch and "
                f"taking over its shared memory{workers}; more workers cannot speed that up)")
    if share is None:
        return ""
    what = "waits on I/O" if io_bound(ev) else "computes"
    return f" (the loader {what}: its processes were on a CPU {pct(share)} of the time)"


def input_fixes(f: Fixes, knobs: Mapping[str, Any], cuda: bool, ev: dict[str, Any]) -> None:
    if receive_bound(ev, knobs):
        receive_fixes(f, knobs, ev)
        return
    if restarts(ev, knobs):  # start-up is neither I/O nor loading: keep the workers
        f.add("persistent_workers", True, f"{ev['epoch_starts']:.0f} epoch start(s) in the "
              f"window took {pct(ev['epoch_start_share'])} of it: without persistent workers "
              "every epoch shuts the workers down and starts (and re-pickles the dataset to) "
              "new ones")
    w = workers_needed(knobs, ev["data_wait_share"])
    io = io_bound(ev) and not restarts(ev, knobs)
    hot = ev.get("loader_hot")
    if hot and hot.get("kind") in ("decode", "transform") and not io:
        # The profile names a decode or a transform: where the workload declares stages, the
        # fix that targets it is to run it on the device, once per batch, before more workers.
        device_stages_fix(f, f"{pct(hot['share'])} of the loader's time is {hot['name']} "
                             f"({hot['where']}): on the device it runs once per batch, after "
                             "the copy, instead of once per sample in the loader")
    waits = (f"; its processes were on a CPU only {pct(ev['loader_cpu_share'])} of the time, "
             "waiting on I/O, so workers beyond the core count still add throughput") if io else ""
    # New workers come with persistent_workers: without it every epoch start respawns them.
    f.add("num_workers", w, f"the step waits on the loader {pct(ev['data_wait_share'])} of the "
          f"time: {w} worker process(es) load batches as fast as the step uses them, in "
          f"parallel with it, kept alive across epochs{waits}",
          with_={"persistent_workers": True}, beyond_domain=io)
    device_stages_fix(f, "the loader runs every input stage on each sample; on the "
                       "device they run once per batch, after the copy")
    if int_knob(knobs, "num_workers", 0) > 0:  # else they come with the workers' fix, or mean nothing
        f.add("persistent_workers", True, "keep workers alive across epochs instead of "
              "respawning them (and re-pickling the dataset) at every epoch start")
        pf = more_prefetch(knobs)
        if pf is not None:
            f.add("prefetch_factor", pf, f"each worker keeps {pf} batches ready, absorbing slow "
                  "items")
    if cuda:
        f.add("pin_memory", True, "page-locked batches: faster copies that can overlap compute")
        f.add("transfer_dtype", "uint8", "ship raw uint8 and normalize on the GPU: less host "
              "work per item in the loader and 4x fewer bytes to copy")


def receive_fixes(f: Fixes, knobs: Mapping[str, Any], ev: dict[str, Any]) -> None:
    """The training process spends the wait receiving the workers' batches: a cost per batch,
    paid in the step's own process, that loading there does not pay and a bigger batch pays
    for more samples. With the mlp workload's in-memory data on 2 cores, no workers ran
    1.9-3.0x the speed of one or two at batch 32 and 128 (thresholds.RECEIVE_SHARE); where
    loading is heavy, the next window measures whether that holds."""
    f.add("num_workers", 0, f"the training process spends the loader wait receiving the "
          f"workers' batches (busy {pct(ev['loader_receive_share'])} of it): loading in the "
          "training process has no transfer to pay")
    bigger_batch(f, knobs, ev, "one transfer from the workers per batch: a bigger batch pays "
                 "it for more samples (changes training dynamics)")


def copy_fixes(f: Fixes, ev: dict[str, Any]) -> None:
    f.add("pin_memory", True, "pageable host memory is staged through a bounce buffer and blocks "
          "the host; pinned memory copies faster and asynchronously")
    f.add("non_blocking", True, "asynchronous copies (with pinned memory) overlap the next "
          "batch's transfer with compute")
    f.add("transfer_dtype", "uint8", "copy uint8 and convert/normalize on the GPU: 4x fewer "
          "bytes over the bus")
    device_stages_fix(f, "copy the input before its resize and float conversion: "
                       "fewer bytes over the bus")


def device_stages_fix(f: Fixes, why: str) -> None:
    """transform_split=0: every input stage that has a batched version runs on the device
    (the agent keeps the host-only stages on the host: the nearest valid split)."""
    if int_knob(f.knobs, "transform_split", 0) > 0:
        f.add("transform_split", 0, why)


def compute_fixes(f: Fixes, knobs: Mapping[str, Any], ev: dict[str, Any],
                   image_inputs: bool | None) -> None:
    optimizer_fixes(f, ev)
    lp = ev["low_precision_share"]
    lp_txt = f" (only {pct(lp)} of kernel time is fp16/bf16/tensor-core)" if lp is not None else ""
    if knobs.get("amp", "off") == "off":
        f.add("amp", "bf16", "mixed precision runs matmuls/convolutions on tensor cores and "
              f"halves activation traffic{lp_txt}",
              with_={"channels_last": True} if image_inputs is not False else None)
    if image_inputs is not False:
        f.add("channels_last", True, "NHWC lets cuDNN pick tensor-core convolution kernels "
              "without layout transposes (4-D image inputs only)")
    f.add("tf32", True, "fp32 matmuls/convolutions that stay in fp32 use TF32 tensor cores")
    f.add("compile", "default", "torch.compile fuses elementwise kernels, cutting memory traffic")
    bigger_batch(f, knobs, ev, f"peak memory is {pct(ev['memory_share_of_limit'])} of the limit: "
                 "a bigger batch uses the idle memory and larger, more efficient kernels "
                 "(changes training dynamics)")


def optimizer_fixes(f: Fixes, ev: dict[str, Any]) -> None:
    """Per-parameter optimizer work (AdamW on a transformer: a few ops per parameter tensor)
    is fixed by the optimizer's implementation, not by the training code or the batch."""
    share = ev["optimizer_share"]
    if share is not None and share >= OPTIMIZER_SHARE:
        f.add("optimizer_impl", "fused", f"the optimizer takes {pct(share)} of the step, "
              "mostly per-parameter work: the fused implementation updates all parameters in "
              "one kernel")
        f.add("compile", "default", "torch.compile fuses the optimizer's per-parameter ops too")


def launch_fixes(f: Fixes, knobs: Mapping[str, Any], ev: dict[str, Any]) -> None:
    optimizer_fixes(f, ev)
    graphs_ok = knobs.get("compile", "off") == "off" and knobs.get("amp") != "fp16"
    if graphs_ok:
        f.add("cuda_graphs", True, "replay the whole captured step with one launch instead of "
              "one per kernel")
    f.add("compile", "reduce-overhead", "compiled, fused kernels replayed as CUDA Graphs: fewer "
          "and cheaper launches")
    bigger_batch(f, knobs, ev, "same number of launches for twice the work per step "
                 "(changes training dynamics)")
    f.add("optimizer_impl", "fused", "one fused optimizer kernel instead of several per "
          "parameter")
