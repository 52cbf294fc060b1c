"""The strategies benchmark's two-panel line chart as SVG text, drawn by matplotlib: its SVG
backend needs no browser (plotly's static export needs kaleido and Chrome). Left, the
best-so-far fraction of the oracle against trials; right, against charged wall time; one line
per strategy, the oracle (1.0) and 0.95 drawn. Built on a bare `Figure` (no pyplot state, so no
figure registry to leak) under a fixed `svg.hashsalt` and no date: the same data gives the
same bytes. Text stays text (`svg.fonttype: none`), so the strategy names can be searched."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f"]
# Strategies that found the same path overlap: a dash pattern each keeps them visible.
DASHES: list[str | tuple[int, tuple[int, ...]]] = [
    "-", (0, (8, 3)), (0, (3, 3)), (0, (10, 3, 2, 3)), (0, (1, 3)), (0, (6, 6)), (0, (12, 2)),
    (0, (2, 6))]

Series = Mapping[str, Sequence[tuple[float, float]]]


def _style(names: Sequence[str]) -> dict[str, dict]:
    return {n: {"color": COLORS[i % len(COLORS)], "linestyle": DASHES[i % len(DASHES)]}
            for i, n in enumerate(names)}


def _panel(ax, title: str, xlabel: str, series: Series, y_lo: float, style: dict) -> None:
    for name, pts in series.items():
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, linewidth=1.8, solid_joinstyle="round", **style[name],
                    marker="o" if len(pts) == 1 else None)  # a lone point shows as a dot
    ax.axhline(1.0, color="black", linewidth=1.0, zorder=1.5)  # under the strategies' lines
    ax.axhline(0.95, color="black", linewidth=0.8, linestyle="--", zorder=1.5)
    x_hi = max((x for pts in series.values() for x, _ in pts), default=1.0) or 1.0
    ax.set(title=title, xlabel=xlabel, xlim=(0, x_hi), ylim=(y_lo, 1.05))
    ax.grid(alpha=0.25)


def chart(by_trial: Series, by_time: Series, caption: str) -> str:
    """The SVG text: left, fraction of the oracle vs trials; right, vs wall time (s)."""
    names = list(dict.fromkeys([*by_trial, *by_time]))
    style = _style(names)
    ys = [y for s in (*by_trial.values(), *by_time.values()) for _, y in s if y > 0]
    y_lo = max(0.0, min([*ys, 0.9]) - 0.05)
    y_lo = round(y_lo * 20) / 20  # a multiple of 0.05
    handles = [Line2D([], [], linewidth=2.2, label=n, **style[n]) for n in names] + [
        Line2D([], [], color="black", linewidth=1.0, label="oracle (1.0)"),
        Line2D([], [], color="black", linewidth=0.8, linestyle="--", label="0.95")]
    ncol = min(len(handles), 5)
    # A fixed salt for the SVG's ids (same data, same bytes); text kept as text, not paths.
    with matplotlib.rc_context({"svg.hashsalt": "autotune-strategies", "svg.fonttype": "none",
                                "font.size": 9}):
        rows = math.ceil(len(handles) / ncol)
        fig = Figure(figsize=(11, 4.6 + 0.22 * rows), layout="constrained")
        # The charts and their legend above, the caption in a strip of its own below.
        grid = fig.add_gridspec(2, 1, height_ratios=[4.4 + 0.22 * rows, 0.2])
        top, bottom = fig.add_subfigure(grid[0]), fig.add_subfigure(grid[1])
        left, right = top.subplots(1, 2, sharey=True)
        _panel(left, "best so far vs trials", "trials", by_trial, y_lo, style)
        _panel(right, "best so far vs wall time", "charged wall time (s)", by_time, y_lo, style)
        left.set_ylabel("fraction of the oracle")
        top.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False,
                   handlelength=3.5)
        bottom.text(0.995, 0.5, caption, ha="right", va="center", fontsize="small",
                    color="#444")
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
        fig.clear()
    return buf.getvalue()
