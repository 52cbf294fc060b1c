"""The report's plots: plotly figures drawn from the report document (report_data.gather) and
Optuna's own visualizations of the study."""

from __future__ import annotations

import logging
import math
import re
import warnings
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState

from autotune.results import report_loader

log = logging.getLogger("autotune")

SHARES = (("data_wait", "data wait"), ("h2d", "copy"), ("compute", "forward+backward"),
          ("optimizer", "optimizer"))

#: A memory limit this many times the largest peak is said in words, not drawn: drawn at its
#: place it pressed every trial into one column at the chart's left edge (the README's CPU
#: study: peaks of 0.5-0.6 GB beside a 21.19 GB limit).
LIMIT_OFF_CHART = 2.0
#: The fewest trials the importances' top group holds (Optuna's default, the top 10%, is one
#: trial in a study of up to 10; Optuna's documentation prefers 5, more than a short study has).
TOP_TRIALS = 3


def figures(study: optuna.Study, d: dict[str, Any]) -> list[tuple[str, Any]]:
    """(title, plotly figure) for each plot that has data."""
    figs: list[tuple[str, Any]] = []
    done = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
    if done:
        history = optuna.visualization.plot_optimization_history(study)
        history.update_layout(yaxis_title=f"{d.get('unit') or 'samples/s'} (search window)")
        figs.append(("Optimization history", history))
    pts = [p for p in d["points"] if p["samples_per_sec"] is not None]
    if pts:
        figs.append(("Throughput vs peak memory",
                     memory_figure(pts, d["memory_limit_gb"], d.get("unit") or "samples/s")))
        bars = go.Figure()
        for key, label in SHARES:
            bars.add_trace(go.Bar(name=label, x=[f"#{p['trial']}" for p in pts],
                                  y=[p["shares"].get(key) or 0 for p in pts]))
        bars.update_layout(barmode="stack", yaxis_title="share of the measured step",
                           xaxis_title="trial")
        figs.append(("Time breakdown per trial", bars))
    if len({str(t.params) for t in done}) >= 3:
        importances = _importances(study)
        if importances is not None:
            figs.append(importances)
    loader = report_loader.figure(d)
    if loader is not None:
        figs.append((report_loader.TITLE, loader))
    return figs


def memory_figure(pts: list[dict[str, Any]], limit_gb: float | None, unit: str) -> go.Figure:
    """Each trial's throughput against its peak memory, each point labelled with its trial
    (one series per sharding where the trials ran several, FSDP2's and DDP's). The memory limit is a line where it is near the trials; far beyond them (LIMIT_OFF_CHART)
    the axis stays on the trials and the limit is said in a note."""
    fig = go.Figure()
    # Trials of several shardings (launched ranks, FSDP2 or DDP): one series per sharding,
    # each marked by whether it fit; peak memory is per rank, the fullest rank's.
    kinds = sorted({str(p.get("sharding")) for p in pts if p.get("sharding")})
    by_kind = len(kinds) > 1
    for kind in kinds if by_kind else [None]:
        for ok, name in ((True, "within the limit"), (False, "over the limit")):
            sel = [p for p in pts if p["feasible"] == ok
                   and (kind is None or str(p.get("sharding")) == kind)]
            if sel:
                fig.add_trace(go.Scatter(
                    x=[p["peak_memory_gb"] for p in sel], y=[p["samples_per_sec"] for p in sel],
                    mode="markers+text", name=f"{kind}, {name}" if kind else name,
                    marker={"symbol": "circle" if ok else "x", "size": 10} if by_kind else None,
                    text=[f"#{p['trial']}" for p in sel], textposition="top center",
                    hovertext=[f"trial {p['trial']}" for p in sel],
                    cliponaxis=False))  # the fastest trial's label sits above the plot area
    fig.update_layout(xaxis_title="peak memory (GB" + (" per rank)" if by_kind else ")"),
                      yaxis_title=unit)
    peaks = [float(p["peak_memory_gb"]) for p in pts if p["peak_memory_gb"] is not None]
    if not limit_gb:
        return fig
    top = max(peaks, default=0.0)
    if top > 0 and limit_gb > LIMIT_OFF_CHART * top:
        fig.update_xaxes(range=[0, 1.15 * top])
        fig.add_annotation(xref="paper", yref="paper", x=1, y=1.12, showarrow=False,
                           xanchor="right", text=f"memory limit {limit_gb:.2f} GB: off the chart, "
                           f"{limit_gb / top:.0f}x the largest peak ({top:.2f} GB)")
    else:
        fig.add_vline(x=limit_gb, line_dash="dash", line_color="red",
                      annotation_text=f"memory limit {limit_gb:.2f} GB")
    return fig


def _importances(study: optuna.Study) -> tuple[str, Any] | None:
    """Optuna's parameter importances (PED-ANOVA: how the top trials' knobs differ from all
    trials'), over the knobs that some trial changed, with a top group of at least TOP_TRIALS.

    With Optuna's defaults on a 6-trial study the top group was the best trial alone, and the
    Parzen estimators' prior weight then ranked cpu_threads first (0.32) though every trial ran
    it at 2, and num_workers second (0.31) though one trial, the slowest, changed it (the gpt
    study of 2026-11-28). The title also names the knobs Optuna warns it cannot rank well: a
    knob that exists only beside another (prefetch_factor and persistent_workers with loader
    workers) has fewer than 2 trials in a regime after a short study; Optuna's UserWarning per
    knob reached the user's terminal after the summary, and the report is where it belongs."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    varied = sorted(p for p in {k for t in done for k in t.params}
                    if len({repr(t.params.get(p)) for t in done}) > 1)
    if len(done) < 2 or not varied:
        return None
    quantile = min(0.5, max(0.1, TOP_TRIALS / len(done)))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fig = optuna.visualization.plot_param_importances(study, evaluator=evaluator,
                                                              params=varied)
        except (ValueError, RuntimeError) as exc:  # too few or too uniform trials
            log.info("report: no parameter importances (%s)", exc)
            return None
    shaky = [m.group(1) for w in caught
             if (m := re.search(r"parameter `([^`]+)` have less than", str(w.message)))]
    # A plotly title does not wrap: the notes go on a second, smaller line.
    notes = "knobs no trial changed are left out"
    if shaky:
        notes += (f"; inaccurate for {', '.join(dict.fromkeys(shaky))}: fewer than 2 trials in "
                  "one of their regimes")
    return (f"Parameter importances: what sets the top {math.ceil(quantile * len(done))} of "
            f"{len(done)} trials apart<br><sup>{notes}</sup>", fig)
