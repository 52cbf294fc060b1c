"""A two-panel line chart as a self-contained SVG (no plotting library needed: matplotlib is
not installed, plotly's static export needs kaleido and a browser): best-so-far fraction of
the oracle against trials and against wall time, one line per strategy, the oracle drawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f"]
DASHES = ["", "8 3", "3 3", "10 3 2 3", "1 3", "6 6", "12 2", "2 6"]
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 440, 300, 50, 10, 30, 40


def _nice_step(span: float) -> float:
    """A 1, 2 or 5 times a power of ten tick step giving at most about 6 ticks."""
    step = 10 ** math.floor(math.log10(max(span, 1e-9) / 5))
    for m in (1, 2, 5, 10):
        if span / (m * step) <= 6:
            return max(m * step, 1.0) if span >= 1 else m * step
    return 10 * step


def _dash(i: int) -> str:
    """Strategies that found the same path overlap: a dash pattern each keeps them visible."""
    pattern = DASHES[i % len(DASHES)]
    return f' stroke-dasharray="{pattern}"' if pattern else ""


def _panel(x0: float, title: str, xlabel: str, series: Mapping[str, Sequence[tuple[float, float]]],
           y_lo: float, colors: Mapping[str, str]) -> list[str]:
    xs = [x for pts in series.values() for x, _ in pts] or [1.0]
    x_hi = max(xs) or 1.0
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x: float) -> float:
        return x0 + PAD_L + pw * x / x_hi

    def py(y: float) -> float:
        return PAD_T + ph * (1.0 - (min(max(y, y_lo), 1.05) - y_lo) / (1.05 - y_lo))

    out = [f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>',
           f'<rect x="{x0 + PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
           f'<text x="{x0 + PAD_L + pw / 2}" y="{H - 6}" text-anchor="middle" font-size="11">'
           f'{escape(xlabel)}</text>']
    for frac in (0.95, 1.0):
        dash = ' stroke-dasharray="4 3"' if frac < 1 else ""
        out.append(f'<line x1="{px(0)}" x2="{px(x_hi)}" y1="{py(frac):.1f}" y2="{py(frac):.1f}" '
                   f'stroke="black"{dash}/>')
    out.append(f'<text x="{px(x_hi) - 4}" y="{py(1.0) - 4:.1f}" text-anchor="end" '
               'font-size="10">oracle (1.0); dashed: 0.95</text>')
    for k in range(6):
        y = y_lo + (1.05 - y_lo) * k / 5
        out.append(f'<text x="{x0 + PAD_L - 4}" y="{py(y) + 3:.1f}" text-anchor="end" '
                   f'font-size="10">{y:.2f}</text>')
    step = _nice_step(x_hi)
    for k in range(int(x_hi / step) + 1):
        out.append(f'<text x="{px(k * step):.1f}" y="{PAD_T + ph + 14}" text-anchor="middle" '
                   f'font-size="10">{k * step:g}</text>')
    for i, (name, pts) in enumerate(series.items()):
        if not pts:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colors[name]}" '
                   f'stroke-width="2" stroke-linejoin="round"{_dash(i)}/>')
    return out


def chart(by_trial: Mapping[str, Sequence[tuple[float, float]]],
          by_time: Mapping[str, Sequence[tuple[float, float]]], caption: str) -> str:
    """The SVG text: left, fraction of the oracle vs trials; right, vs wall time (s)."""
    names = list(dict.fromkeys([*by_trial, *by_time]))
    colors = {n: COLORS[i % len(COLORS)] for i, n in enumerate(names)}
    ys = [y for s in (*by_trial.values(), *by_time.values()) for _, y in s if y > 0]
    y_lo = max(0.0, min([*ys, 0.9]) - 0.05)
    y_lo = round(y_lo * 20) / 20  # a multiple of 0.05
    legend_h = 16 * len(names) + 10
    body = [*_panel(0, "best so far vs trials", "trials", by_trial, y_lo, colors),
            *_panel(W, "best so far vs wall time", "charged wall time (s)", by_time, y_lo, colors)]
    for i, name in enumerate(names):
        y = H + 14 + 16 * i
        body.append(f'<line x1="{PAD_L}" x2="{PAD_L + 24}" y1="{y - 4}" y2="{y - 4}" '
                    f'stroke="{colors[name]}" stroke-width="3"{_dash(i)}/>')
        body.append(f'<text x="{PAD_L + 30}" y="{y}" font-size="11">{escape(name)}</text>')
    body.append(f'<text x="{2 * W - 10}" y="{H + legend_h - 4}" text-anchor="end" '
                f'font-size="10">{escape(caption)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H + legend_h}" '
            f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")
