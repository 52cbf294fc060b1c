"""A study's unit: the objective is real tokens/s where the workload's batches carry tokens,
else samples/s (autotune/core/tokens.py). The first measured trial sets the study's unit;
every later figure is checked against it, so that no study ranks tokens/s against samples/s."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.core.tokens import TOKENS, CrossUnit, same_unit, unit_of
from autotune.measure.protocol import WindowResult
from autotune.results.record import set_study_attrs, study_attrs


def in_study_unit(study: optuna.Study, result: WindowResult) -> WindowResult:
    """``result``, or a failed one saying why: the study's unit is its first measured trial's;
    a later window in another unit (a workload whose batches stopped carrying tokens, a
    resumed study whose workload changed) fails rather than be ranked against figures it
    cannot be compared with."""
    if not result.ok:
        return result
    stored = study_attrs(study).get("unit")
    if stored is None:
        set_study_attrs(study, {"unit": result.unit})
        return result
    try:
        same_unit(stored, result.unit, "this trial against the study's earlier trials")
    except CrossUnit as exc:
        return WindowResult(outcome="crash", error=str(exc), unit=result.unit)
    return result


def result_line(r: WindowResult, limit: float) -> str:
    """One trial's outcome in the log: its rate in its unit (a tokens/s window also states
    its samples/s and padding share), step times, peak memory, compile time."""
    if r.outcome == "ok":
        over = f" OVER LIMIT ({over_limit(r, limit)})" if r.peak_memory_gb > limit else ""
        tokens = (f" ({r.samples_per_sec:,.1f} samples/s, padding {r.padding_share or 0:.0%})"
                  if r.unit == TOKENS else "")
        return (f"{r.rate:,.1f} {r.unit}{tokens}, step {r.step_ms.get('median', 0):.1f} ms "
                f"(p10 {r.step_ms.get('p10', 0):.1f}, p90 {r.step_ms.get('p90', 0):.1f}), "
                f"peak {r.peak_memory_gb:.2f} GB{over}, compile {r.compile_s:.1f}s")
    return f"{r.outcome.upper()}: {r.error}"


def unit_label(doc: dict[str, Any] | None) -> str:
    """best.yaml's unit (its metrics'): 'samples/s' for a document written before units."""
    return unit_of(((doc or {}).get("metrics") or {}).get("unit"))


def over_limit(r: WindowResult, limit: float) -> str:
    """Why a measured window is over the memory limit, naming the rank where there are ranks
    (the limit holds per rank): "rank 1 peaked at 2.13 GB, over the 1.90 GB limit per rank
    (rank 0: 2.12 GB)"."""
    ranks = [d for d in r.ranks if d.get("peak_memory_gb") is not None]
    if not ranks:
        return f"peak {r.peak_memory_gb:.2f} GB, over the {limit:.2f} GB limit"
    top = max(ranks, key=lambda d: float(d["peak_memory_gb"]))
    others = ", ".join(f"rank {d['rank']}: {float(d['peak_memory_gb']):.2f} GB"
                       for d in sorted(ranks, key=lambda d: d["rank"]) if d is not top)
    return (f"rank {top['rank']} peaked at {float(top['peak_memory_gb']):.2f} GB, over the "
            f"{limit:.2f} GB limit per rank" + (f" ({others})" if others else ""))
