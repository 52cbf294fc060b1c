"""PARENT side: a trial's measurements as the named numbers every verdict reads.

From the WindowResult (as a dict) and its trace summary to one flat dict of shares, counts
and percentages, None where not measured: the rules in verdicts.py compare these with
thresholds.py, and the report shows them beside each verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.core.numbers import finite


def as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, Mapping):
        return dict(result)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return {}


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def evidence(result: dict[str, Any], device: str, memory_limit_gb: float) -> dict[str, Any]:
    """The named numbers every verdict is read from (None where not measured).

    Shares are 0-1 of the measured step; *_pct are 0-100."""
    timers, trace, step_ms = (mapping(result.get(k)) for k in ("timers", "trace", "step_ms"))
    wall = finite(trace.get("wall_ms_per_step"))

    def trace_share(key: str) -> float | None:
        v = finite(trace.get(key))
        return round(v / wall, 4) if v is not None and wall else None

    data_wait = finite(timers.get("data_wait"))
    if data_wait is None:
        data_wait = trace_share("data_ms_per_step")
    h2d = finite(timers.get("h2d"))
    if h2d is None:
        h2d = trace_share("h2d_ms_per_step")
    syncs = finite(trace.get("syncs_per_step"))
    copy_syncs = finite(trace.get("copy_syncs_per_step")) or 0.0
    stage_syncs = finite(trace.get("stage_syncs_per_step")) or 0.0
    peak = finite(result.get("peak_memory_gb"))
    limit = finite(memory_limit_gb)
    return {
        "device": device,
        "samples_per_sec": finite(result.get("samples_per_sec")),
        "step_ms": finite(step_ms.get("median")) or finite(timers.get("step_ms")),
        "data_wait_share": data_wait,
        "h2d_share": h2d,
        "compute_share": finite(timers.get("compute")),
        "page_faults_per_step": finite(timers.get("page_faults_per_step")),
        "loader_cpu_share": finite(timers.get("loader_cpu_share")),
        "loader_receive_share": finite(timers.get("loader_receive_share")),
        "optimizer_share": finite(timers.get("optimizer")),
        "epoch_starts": finite(timers.get("epoch_starts")),
        "epoch_start_share": finite(timers.get("epoch_start_share")),
        "epoch_start_cost_share": finite(timers.get("epoch_start_cost_share")),
        "gpu_busy_pct": finite(trace.get("gpu_busy_pct")),
        "kernels_per_step": finite(trace.get("kernels_per_step")),
        "launches_per_step": finite(trace.get("launches_per_step")),
        "kernel_median_us": finite(trace.get("kernel_median_us")),
        "short_kernel_share": finite(trace.get("short_kernel_share")),
        "syncs_per_step": syncs,
        "step_syncs_per_step": (max(0.0, syncs - copy_syncs - stage_syncs)
                                if syncs is not None else None),
        "stage_syncs_per_step": stage_syncs,
        "sync_share": trace_share("sync_ms_per_step"),
        "low_precision_share": finite(trace.get("low_precision_kernel_share")),
        "cpu_op_share": trace_share("cpu_op_ms_per_step"),
        "peak_memory_gb": peak,
        "memory_share_of_limit": round(peak / limit, 4) if peak and limit and limit > 0 else None,
        "trace": "error: " + str(trace["error"]) if trace.get("error") else
                 ("yes" if trace else "none"),
        **_loader_evidence(mapping(result.get("loader_profile"))),
    }


LOADER_KEYS = ("loader_hot", "loader_frames", "loader_getitem")


def _loader_evidence(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The loader profile's hot spot (measure/loader_profile.py), where one was taken."""
    frames = [f for f in profile.get("frames") or [] if isinstance(f, Mapping)]
    if not frames:
        return {"loader_hot": None, "loader_frames": None, "loader_getitem": None}
    top = [{k: f.get(k) for k in ("name", "kind", "share", "where")} for f in frames[:3]]
    getitem = mapping(profile.get("getitem")).get("where")
    return {"loader_hot": top[0], "loader_frames": top, "loader_getitem": getitem}
