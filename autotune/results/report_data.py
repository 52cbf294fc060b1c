"""The facts a study report shows, read from the stored study alone (any storage, any time).

``report_html`` renders them as report.html and report.md; nothing here formats or plots.
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.results.export import best_document
from autotune.results.record import study_attrs, trial_attrs
from autotune.results.trials import (
    baseline_trial,
    beats,
    chosen_trial,
    counts,
    feasible,
    rate,
    study_unit,
    window_noise,
)


def path_to_best(study: optuna.Study) -> list[dict[str, Any]]:
    """A hand-tuning log's results table, automatically: the trials that raised the best so far, in
    the order they ran, each with the knobs it changed from the previous best and its gain.
    A trial raises the best only by more than the windows' own noise (trials.beats).

    The first row is the baseline (trial 0) when it ran; gains are search figures. Where the
    confirmation exported a trial that never raised the best (its search figure within the
    noise of the best's), that trial ends the table, marked so: the gpt study of 2026-11-28
    exported trial 4 at 1.19x while the table stopped at trial 2, and nothing on the page led
    from one to the other."""
    rows: list[dict[str, Any]] = []
    base = baseline_trial(study)
    prev: FrozenTrial | None = None
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if not feasible(t) or (prev is not None and not beats(t, prev)):
            continue
        rows.append(_path_row(t, prev, base))
        prev = t
    chosen, conf = chosen_trial(study)
    if conf and chosen is not None and prev is not None and chosen.number != prev.number:
        why = ("baseline" if base is not None and chosen.number == base.number
               else "tie" if conf.get("tie") else "fastest")
        rows.append({**_path_row(chosen, prev, base), "exported": why})
    # The confirmed speedup beside the search's: a path whose gains read 1.09x and 1.08x sat
    # beside an exported 1.43x, and nothing reconciled the two footings.
    intervals = (conf or {}).get("intervals") or {}
    for row in rows:
        iv = intervals.get(str(row["trial"]))
        if iv and base is not None and row["trial"] != base.number:
            row["confirmed"] = _interval_text(iv)
    return rows


def changed_knobs(study: optuna.Study) -> dict[str, list[Any]]:
    """The exported configuration's knobs that differ from the baseline's: [yours, exported]."""
    chosen, _ = chosen_trial(study)
    base = baseline_trial(study)
    if chosen is None or base is None:
        return {}
    before = trial_attrs(base).get("knobs") or {}
    after = trial_attrs(chosen).get("knobs") or {}
    return {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}


def _path_row(t: FrozenTrial, prev: FrozenTrial | None, base: FrozenTrial | None
              ) -> dict[str, Any]:
    """One row: ``t`` against ``prev``, the best before it (or the baseline)."""
    before = trial_attrs(prev or base or t).get("knobs") or {}
    knobs = trial_attrs(t).get("knobs") or {}
    return {
        "trial": t.number,
        "source": trial_attrs(t).get("source", ""),
        "changed": {k: [before.get(k), v] for k, v in knobs.items() if before.get(k) != v},
        "samples_per_sec": float(t.value),  # type: ignore[arg-type]  # in the study's unit
        "padding_share": trial_attrs(t).get("padding_share"),
        "gain": float(t.value / prev.value) if prev is not None and prev.value else None,  # type: ignore[operator]
        "vs_baseline": float(t.value / base.value) if base is not None and base.value else None,  # type: ignore[operator]
        "bottleneck": (trial_attrs(t).get("diagnosis") or {}).get("bottleneck"),
        "spread": window_noise(t) or None,  # 0: too few steps to compare the window's halves
        "contended": bool((trial_attrs(t).get("contention") or {}).get("contended")),
    }


def failures(study: optuna.Study) -> list[dict[str, Any]]:
    """Every trial that did not finish a clean window within the limit, with its reason."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if feasible(t) or t.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        a = trial_attrs(t)
        state = "INFEASIBLE" if t.state == TrialState.COMPLETE else t.state.name
        out.append({"trial": t.number, "state": state, "outcome": a.get("outcome", ""),
                    "reason": a.get("reason") or "over the memory limit",
                    "knobs": a.get("knobs") or {}})
    return out


def confirmation(study: optuna.Study) -> list[dict[str, Any]]:
    """The finalists' and the baseline's confirmation rounds: runs, median, spread (%), the
    speedup's interval and how many of its windows were contended."""
    conf = study_attrs(study).get("confirmation") or {}
    intervals = conf.get("intervals") or {}
    busy = conf.get("contended") or {}
    rows = []
    for number, raw in (conf.get("runs") or {}).items():
        runs = [v for v in raw if v]
        if not runs:
            continue
        med = statistics.median(runs)
        iv = intervals.get(number) or {}
        rows.append({"trial": int(number), "runs": runs, "median": med,
                     "spread_pct": 100 * (max(runs) - min(runs)) / med if med else None,
                     "interval": _interval_text(iv) if iv else "",
                     "contended": sum(1 for b in busy.get(number) or [] if b),
                     "chosen": int(number) == conf.get("best_trial"),
                     "baseline": int(number) == conf.get("baseline_trial")})
    return rows


def _interval_text(iv: dict[str, Any]) -> str:
    if iv.get("ci_low") is None:
        return f"{iv['speedup']:.2f}x ({iv['rounds']} rounds: no interval)"
    return f"{iv['speedup']:.2f}x ({iv['ci_low']:.2f}-{iv['ci_high']:.2f})"


def trial_points(study: optuna.Study) -> list[dict[str, Any]]:
    """Per measured trial: throughput, peak memory and the step's time shares (plots)."""
    pts = []
    for t in study.get_trials(deepcopy=False):
        a = trial_attrs(t)
        if a.get("outcome") != "ok" or "duplicate_of" in a:
            continue
        timers = a.get("timers") or {}
        pts.append({"trial": t.number, "samples_per_sec": rate(a),  # in the study's unit
                    "padding_share": a.get("padding_share"),
                    "peak_memory_gb": a.get("peak_memory_gb"), "feasible": feasible(t),
                    "shares": {k: timers.get(k) for k in ("data_wait", "h2d", "compute", "optimizer")},
                    "sharding": (a.get("knobs") or {}).get("sharding"),
                    "knobs": a.get("knobs") or {}})
    return pts


def gather(study: optuna.Study, storage_url: str) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    attrs = study_attrs(study)
    base = baseline_trial(study)
    return {
        "name": study.study_name,
        # Every throughput of the report is in this unit (the path's, the points', the
        # confirmation's): real tokens/s where the workload has tokens, else samples/s.
        "unit": study_unit(study),
        "workload": attrs.get("workload"),
        "device": attrs.get("device") or {},
        "memory_limit_gb": attrs.get("memory_limit_gb"),
        "best": best_document(study, storage_url),
        "counts": counts(study),
        "path": path_to_best(study),
        "changed": changed_knobs(study),
        "failures": failures(study),
        "confirmation": confirmation(study),
        "points": trial_points(study),
        "baseline_evidence": ((trial_attrs(base).get("diagnosis") or {}).get("evidence")
                              if base else None),
        "best_evidence": _best_evidence(study),
        "n_trials": len(study.get_trials(deepcopy=False)),
        "comm": comm_rows(study),
    }


def comm_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """A launched study (several ranks per trial): each measured trial's step with and without
    DDP's all-reduce and the share of its step the all-reduce adds (measure/comm.py); beside
    it the slowest rank's profiled all-reduce and the share backward hid
    (diagnose/comm_trace.py), None where the trial was not profiled."""
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        comm, ranks = trial_attrs(t).get("comm") or {}, trial_attrs(t).get("ranks") or []
        if comm:
            traced = (comm.get("trace") or {}).get("slowest") or {}
            rows.append({"trial": t.number, "ranks": len(ranks), **comm,
                         "slowest": ranks[0]["rank"] if ranks else None,
                         "peaks": [d.get("peak_memory_gb") for d in sorted(
                             ranks, key=lambda d: d["rank"])],
                         "feasible": feasible(t),
                         "trace_allreduce_ms": traced.get("allreduce_ms_per_step"),
                         "trace_overlap_share": traced.get("overlap_share")})
    return rows


def _best_evidence(study: optuna.Study) -> dict[str, Any] | None:
    t, _ = chosen_trial(study)
    return (trial_attrs(t).get("diagnosis") or {}).get("evidence") if t else None
