"""The loader profile in the report: where the input pipeline's time goes, as a chart and lines.

best.yaml's ``loader_profile`` holds, for the baseline and the best trial where each waited on
its loader, a profile of the input pipeline alone (autotune/measure/loader_profile.py): frames
(a decode, a transform, the collate, the user's own code) with their shares of one profiled
pass, the share spent waiting, and where the dataset's ``__getitem__`` is. ``report_html``
shows it as a bar chart (one bar per frame and trial, coloured by kind) and as one line per
profile, in report.html and report.md alike.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

TITLE = "Where the loader's time goes"
#: One colour per kind of frame, the same in every trace.
KIND_COLOURS = {"decode": "#d62728", "read": "#8c564b", "transform": "#1f77b4",
                "collate": "#9467bd", "wait": "#7f7f7f", "user": "#ff7f0e", "other": "#bcbd22"}
NOTE = ("Shares are of one in-process pass over a few batches (no worker processes) under "
        "cProfile, which slows Python-heavy code (many small calls) far more than C code (a "
        "decode, a copy): Python work reads larger than it is, and the pass's time is not the "
        "loader's real speed.")


def profiles(d: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, profile) for the baseline's and the best trial's loader profiles that exist;
    one entry when the best trial is the baseline."""
    best = d.get("best") or {}
    section = best.get("loader_profile") or {}
    base_n = next((r["trial"] for r in d.get("path") or [] if r.get("source") == "baseline"), None)
    best_n = best.get("best_trial")
    base, top = section.get("baseline"), section.get("best")
    if base and top and base_n == best_n:
        return [(f"baseline = best (trial {best_n})", top)]
    out = []
    if base:
        out.append(("baseline" + (f" (trial {base_n})" if base_n is not None else ""), base))
    if top:
        out.append((f"best (trial {best_n})", top))
    return out


def has_chart(d: dict[str, Any]) -> bool:
    """Whether ``figure(d)`` draws anything: a profile with frames."""
    return any(p.get("frames") for _, p in profiles(d))


def lines(d: dict[str, Any], text: Callable[[str], str] = str,
          code: Callable[[str], str] = str) -> list[str]:
    """One line per profile, then the note on what the shares mean; [] without a profile.
    ``text`` and ``code`` format free text and code (a path, ``__getitem__``) for the output."""
    out = []
    for label, p in profiles(d):
        getitem = p.get("getitem") or {}
        out.append(
            text(f"{label}: {p.get('summary') or 'no summary'}. The frames cover "
                 f"{_pct(p.get('coverage'))} of a {_num(p.get('total_s'), '.2f')} s pass over "
                 f"{p.get('batches', '?')} batches; the dataset's ") + code("__getitem__")
            + text(" is at ") + code(str(getitem.get("where") or "?"))
            + text(f" ({_pct(getitem.get('share'))} of the pass, inclusive)."))
    return [*out, text(NOTE)] if out else []


def markdown(d: dict[str, Any]) -> list[str]:
    """The loader-profile section of report.md (no lines without a profile)."""
    body = lines(d, _md, lambda c: f"`{c}`")
    if not body:
        return []
    return ["## Loader profile", "", *[f"- {x}" for x in body[:-1]], "", f"_{body[-1]}_", ""]


def html_section(d: dict[str, Any]) -> str:
    """The loader-profile section of report.html ("" without a profile)."""
    body = lines(d, html.escape, lambda c: f"<code>{html.escape(c)}</code>")
    if not body:
        return ""
    items = "".join(f"<li>{x}</li>" for x in body[:-1])
    return (f"<h2>Loader profile</h2><ul>{items}</ul>"
            f"<p class='note'>{body[-1]} Chart: “{html.escape(TITLE)}”, with the plots.</p>")


def figure(d: dict[str, Any]) -> Any:
    """Horizontal bars, one row per frame (largest share at the top), one trace per profile
    (the baseline pale), coloured by kind; None without frames."""
    profs = [(label, p) for label, p in profiles(d) if p.get("frames")]
    if not profs:
        return None
    top: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for _, p in profs:
        for f in p["frames"]:
            top[f["name"]] = max(top.get(f["name"], 0.0), float(f.get("share") or 0.0))
            kinds.setdefault(f["name"], str(f.get("kind") or "other"))
    names = sorted(top, key=lambda n: -top[n])
    fig = go.Figure()
    for label, p in profs:
        by_name = {f["name"]: f for f in p["frames"]}
        frames = [by_name.get(n) for n in names]
        pale = len(profs) > 1 and label.startswith("baseline")  # (a hatch pattern with
        # per-bar colours makes plotly.js warn in the console)
        fig.add_trace(go.Bar(
            orientation="h", name=_esc(label), legendgroup="trial",
            legendgrouptitle_text="trial" + (" (pale: the baseline)" if len(profs) > 1 else ""),
            y=[_esc(n) for n in names],
            x=[100 * float(f.get("share") or 0.0) if f else None for f in frames],
            text=[f"{100 * float(f.get('share') or 0.0):.0f}%" if f else "" for f in frames],
            textposition="outside", cliponaxis=False,
            hovertext=[_hover(f) if f else "" for f in frames], hoverinfo="text+name",
            marker={"color": [KIND_COLOURS.get(kinds[n], "#999999") for n in names],
                    "opacity": 0.4 if pale else 1.0,
                    "line": {"color": "#333333", "width": 1 if pale else 0}}))
    for kind in dict.fromkeys(kinds[n] for n in names):  # the colour key: one entry per kind
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind,
                                 legendgroup="kind", legendgrouptitle_text="kind",
                                 marker={"symbol": "square", "size": 12,
                                         "color": KIND_COLOURS.get(kind, "#999999")}))
    fig.update_layout(
        barmode="group", bargap=0.25, height=max(440, 140 + 24 * len(names) * len(profs)),
        xaxis={"title": {"text": "share of the loader's time in the profiled pass (%)"},
               "rangemode": "tozero", "range": [0, min(100.0, 100 * max(top.values()) * 1.15 + 3)]},
        yaxis={"autorange": "reversed", "automargin": True},
        legend={"traceorder": "grouped"})
    return fig


def _hover(f: dict[str, Any]) -> str:
    return (f"{_esc(str(f['name']))}<br>{_esc(str(f.get('kind') or '?'))} at "
            f"{_esc(str(f.get('where') or '?'))}<br>{100 * float(f.get('share') or 0.0):.1f}% "
            f"of the pass, {f.get('calls', '?')} calls")


def _esc(text: str) -> str:
    """Text for plotly, which reads its labels as a small HTML subset: ``<lambda>`` as text."""
    return html.escape(text, quote=False)


def _md(text: str) -> str:
    """Markdown text: ``<lambda>`` or a ``*`` in a frame name stays text."""
    return re.sub(r"([\\`*<>\[\]])", r"\\\1", text)


def _pct(v: Any) -> str:
    return "?" if v is None else f"{100 * float(v):.0f}%"


def _num(v: Any, fmt: str) -> str:
    return "?" if v is None else f"{float(v):{fmt}}"
