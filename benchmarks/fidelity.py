"""The strategy benchmark's fidelity figures, as pure functions over measured windows: which
configurations to re-measure, the long window, each configuration's short-vs-long error and the
long window's agreement with itself, and Kendall's tau between rankings (benchmarks/strategies.py
measures; benchmarks/strategies_report.py writes)."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from autotune.core.config import WindowConfig, sized
from benchmarks.strategy_figures import kendall_tau

__all__ = ["fidelity_row", "fidelity_sets", "fidelity_tau", "long_self_tau", "long_window"]


def long_window(window: WindowConfig, factor: int) -> WindowConfig:
    """The study's window ``factor`` times longer (steps, seconds and its time limit)."""
    return dataclasses.replace(
        window, measure_steps=sized(window.measure_steps) * factor,
        min_measure_steps=sized(window.min_measure_steps) * factor,
        measure_seconds=sized(window.measure_seconds) * factor,
        min_measure_seconds=window.min_measure_seconds * factor,
        timeout_s=window.timeout_s * factor, profile=False)


def fidelity_sets(truth: dict[str, float], grid_keys: set[str], top: int,
                  spread: int) -> tuple[list[str], list[str]]:
    """The top ``top`` configurations by the oracle's figures, and ``spread`` more at evenly
    spaced ranks over the rest of the grid (its slowest included): among the top, which lie
    within a few percent of each other, a ranking mostly tests the machine's noise; across the
    range it tests whether a short window orders configurations that really differ."""
    ranked = sorted(grid_keys, key=lambda k: truth[k], reverse=True)
    rest = ranked[top:]
    if spread <= 0 or not rest:
        return ranked[:top], []
    n = min(spread, len(rest))
    picks = sorted({round(i * (len(rest) - 1) / max(n - 1, 1)) for i in range(n)})
    return ranked[:top], [rest[i] for i in picks]


def fidelity_row(key: str, rank: int, search: float, shorts: list[float | None],
                 longs: list[float | None], long_noise: float | None,
                 long_s: float) -> dict[str, Any]:
    """One configuration's fidelity figures: medians of its short and long windows, the short
    one's error against the long, and how far its long windows differ from each other."""
    s = [v for v in shorts if v]
    lg = [v for v in longs if v]
    short = statistics.median(s) if s else None
    long = statistics.median(lg) if lg else None
    return {"key": key, "rank": rank, "search": search, "short": short, "long": long,
            "shorts": shorts, "longs": longs,
            "error": None if not (long and short) else (short - long) / long,
            "long_spread": (max(lg) - min(lg)) / long if long and len(lg) > 1 else None,
            "long_noise": long_noise, "long_s": long_s}


def fidelity_tau(rows: list[dict[str, Any]]) -> float | None:
    """Kendall's tau between the short windows' and the long windows' ranking of ``rows``."""
    got = [r for r in rows if r["long"] and r["short"]]
    if len(got) < 2:
        return None
    return kendall_tau([r["short"] for r in got], [r["long"] for r in got])


def long_self_tau(rows: list[dict[str, Any]]) -> float | None:
    """Kendall's tau between the long window's first and second rounds: how well the long
    window ranks ``rows`` against itself, a ceiling for what a short window can show here."""
    got = [r for r in rows if len(r["longs"]) > 1 and r["longs"][0] and r["longs"][1]]
    if len(got) < 2:
        return None
    return kendall_tau([r["longs"][0] for r in got], [r["longs"][1] for r in got])
