"""The communication verdict of a trial launched as ranks: DDP's all-reduce exposed past
COMM_EXPOSED_SHARE of the step, measured (measure/comm.py), and the fixes for it that this
study's space holds (verdicts.py calls it first, before any other rule)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.diagnose.fixes import Fixes, bigger_batch, first_fixes, int_knob, pct
from autotune.diagnose.thresholds import COMM_EXPOSED_SHARE


def communication(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes) -> tuple[str, str, str]:
    """A profiling guide's rules: "NCCL calls between backward and optimizer -> DDP gradient sync not
    overlapped -> check bucket size, use gradient_as_bucket_view=True"; "throughput does not
    scale with GPUs -> large NCCL time -> overlap compute/communication, increase batch"."""
    if str(knobs.get("sharding") or "no_shard") != "no_shard":
        return sharded_communication(ev, knobs, f)
    share, low = float(ev["comm_exposed_share"]), float(ev["comm_exposed_share_low"])
    if True in _domain_values(f, "accumulation_no_sync"):  # the study accumulates gradients
        f.add("accumulation_no_sync", True, "one all-reduce per optimizer step instead of one "
              "per micro-batch")
    f.add("gradient_as_bucket_view", True, "gradients live in the all-reduce buckets: no copy "
          "into them before each all-reduce")
    cap = int_knob(knobs, "bucket_cap_mb", 25)
    f.add("bucket_cap_mb", 100 if cap < 100 else 5, "fewer, larger all-reduce messages"
          if cap < 100 else "smaller buckets start their all-reduce earlier in backward")
    f.add("static_graph", True, "DDP skips its per-step search for unused parameters and may "
          "reorder buckets to the order gradients are ready")
    bigger_batch(f, knobs, ev, "the same all-reduce for twice the samples per rank (changes "
                 "training dynamics)")
    if True in _domain_values(f, "batched_grad_copy"):
        f.add("batched_grad_copy", True, "one batched copy into each bucket instead of one per "
              "parameter")
    if "bf16" in _domain_values(f, "comm_hook"):  # listed by the user: it changes numerics
        f.add("comm_hook", "bf16", "half the bytes all-reduced (the sum in bf16)")
    bound = f", at least {pct(low)}" if low < share else ""
    return ("communication", f"comm_exposed_share_low {low:.2f} >= {COMM_EXPOSED_SHARE}",
            f"Communication-bound: {pct(share)} of the step ({ev.get('comm_exposed_ms') or 0:.1f} "
            f"ms{bound}) waits on the gradient all-reduce, not hidden behind backward (the same "
            f"step without it is that much faster); try {first_fixes(f)}.")


def _domain_values(f: Fixes, knob: str) -> list[Any]:
    """The values the study searches for ``knob`` (none known: [])."""
    dom = (f.domains or {}).get(knob)
    return list(dom.values) if dom is not None else []


def sharded_communication(ev: dict[str, Any], knobs: Mapping[str, Any],
                          f: Fixes) -> tuple[str, str, str]:
    """FSDP2's all-gathers and reduce-scatters not hidden behind forward and backward: the
    recipe of PyTorch's FSDP2 documentation and torchtitan: prefetch the next groups'
    all-gathers, keep parameters from forward to backward (shard_grad_op: one all-gather less a
    step; torchtune #2402 measured +8% tokens/s on Qwen2.5-3B), coarser groups (fewer
    collectives), more samples per rank for the same collectives, half the bytes gathered."""
    share, low = float(ev["comm_exposed_share"]), float(ev["comm_exposed_share_low"])
    if True in _domain_values(f, "accumulation_no_sync"):  # the study accumulates gradients
        f.add("accumulation_no_sync", True, "one reduce-scatter per optimizer step, and the "
              "parameters gathered once per cycle instead of once per micro-batch")
    depth = int_knob(knobs, "fsdp_prefetch", 0)
    f.add("fsdp_prefetch", min(2, depth + 1), "all-gather the next groups' parameters while "
          "this one computes, in forward as in backward")
    if knobs.get("sharding") == "full_shard":
        f.add("sharding", "shard_grad_op", "keep each block's parameters from forward to "
              "backward: one all-gather less a step (more memory)")
    every = int_knob(knobs, "fsdp_wrap_blocks", 1)
    f.add("fsdp_wrap_blocks", every * 2, "fewer, larger all-gathers and reduce-scatters")
    bigger_batch(f, knobs, ev, "the same collectives for twice the samples per rank (changes "
                 "training dynamics)")
    if knobs.get("fsdp_param_dtype", "fp32") == "fp32":
        f.add("fsdp_param_dtype", "bf16", "half the bytes all-gathered (and bf16 compute)")
    if "bf16" in _domain_values(f, "fsdp_reduce_dtype"):  # listed by the user: numerics change
        f.add("fsdp_reduce_dtype", "bf16", "half the bytes reduce-scattered (the sum in bf16)")
    bound = f", at least {pct(low)}" if low < share else ""
    return ("communication", f"comm_exposed_share_low {low:.2f} >= {COMM_EXPOSED_SHARE}",
            f"Communication-bound: {pct(share)} of the step ({ev.get('comm_exposed_ms') or 0:.1f} "
            f"ms{bound}) waits on FSDP2's collectives{collective_words(ev)}, not hidden behind "
            f"forward and backward (the same step with every parameter gathered beforehand is "
            f"that much faster); try {first_fixes(f)}.")


def collective_words(ev: Mapping[str, Any]) -> str:
    """" (5 all-gathers, 9.4 ms, and 3 reduce-scatters, 14.0 ms, a step)" from the profile."""
    parts = [f"{float(n):g} {name}, {float(ms):.1f} ms" for n, ms, name in (
        (ev.get("comm_all_gathers"), ev.get("comm_all_gather_ms"), "all-gathers"),
        (ev.get("comm_reduce_scatters"), ev.get("comm_reduce_scatter_ms"), "reduce-scatters"))
        if n is not None and ms is not None]
    return f" ({' and '.join(parts)} a step)" if parts else ""
