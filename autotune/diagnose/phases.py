"""The other large phases of a step: a verdict names one bottleneck, and every other phase
that takes PHASE_NOTABLE_SHARE of the step or more is named beside it, with its fixes after
the verdict's own.

A 2-rank DDP study of a wide MLP (this project's 2-core VM, 2026-11-28) measured 25.8% of
its baseline's step exposed on the all-reduce, lower bound 24.2%, just under the
communication verdict's COMM_EXPOSED_SHARE; its diagnosis read "Compute-bound on CPU ... try
host_allocator=retain, batch_size=64" with no word of the all-reduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.diagnose.comm_verdict import communication
from autotune.diagnose.fixes import Fixes, pct
from autotune.diagnose.thresholds import COMM_EXPOSED_SHARE, MEMORY_HIGH_SHARE, PHASE_NOTABLE_SHARE


def also_large(ev: dict[str, Any], knobs: Mapping[str, Any], f: Fixes, bottleneck: str) -> str:
    """" Also large: the gradient all-reduce adds 26% of the step (4.1 ms; at least 24%)."
    for every phase other than ``bottleneck``'s at or above PHASE_NOTABLE_SHARE ("" where
    none); the communication's fixes are added after the verdict's."""
    named = []
    share = ev.get("comm_exposed_share")
    if bottleneck != "communication" and share is not None and float(share) >= PHASE_NOTABLE_SHARE:
        low = float(ev.get("comm_exposed_share_low") or 0.0)
        what = ("FSDP2's all-gathers and reduce-scatters add" if ev.get("comm_all_gathers") is not None
                else "the gradient all-reduce adds")
        under = (f"; at least {pct(low)}, under the {pct(COMM_EXPOSED_SHARE)} the "
                 "communication verdict needs" if low < COMM_EXPOSED_SHARE else "")
        named.append(f"{what} {pct(float(share))} of the step "
                     f"({float(ev.get('comm_exposed_ms') or 0):.1f} ms{under})")
        communication(ev, knobs, f)  # its fixes, after the verdict's
    for key, label, rule in (("data_wait_share", "the wait on the DataLoader", "input_pipeline"),
                             ("h2d_share", "host-to-device copies", "host_to_device"),
                             ("optimizer_share", "the optimizer step", None)):
        value = ev.get(key)
        if bottleneck != rule and value is not None and float(value) >= PHASE_NOTABLE_SHARE:
            named.append(f"{label} takes {pct(float(value))} of the step")
    memory = ev.get("memory_share_of_limit")
    if bottleneck != "memory" and memory is not None and float(memory) >= MEMORY_HIGH_SHARE:
        named.append(f"peak memory is {pct(float(memory))} of the limit")
    return f" Also large: {'; '.join(named)}." if named else ""
