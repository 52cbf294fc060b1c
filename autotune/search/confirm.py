"""Re-measuring the finalists: the fastest few trials and the baseline, run again, in turn.

The best of N noisy trials is biased upward (it won partly by luck), and a baseline measured
once at the start is exposed to whatever the machine was doing then. So after the search the
``top`` fastest distinct configurations and the baseline are re-run in fresh windows, round
robin so that drift on the machine hits them alike. The finalist with the highest median wins:
best.yaml reports its median, the runs' spread and the speedup over the baseline's median,
figures a production run can expect to reproduce.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import Any

import optuna

from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.runner import run_window
from autotune.results.record import set_study_attrs, trial_attrs
from autotune.results.trials import baseline_trial, best_trial, finalists
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")


def _request(setup: StudySetup, knobs: dict[str, Any]) -> TrialRequest:
    return TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                        window=setup.window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                        env=setup.trial_env, grad_accum=setup.grad_accum(knobs))


def confirm(setup: StudySetup, study: optuna.Study, runs: int, top: int = 1,
            stop: StopFlag | None = None,
            run: Callable[..., WindowResult] = run_window) -> dict[str, Any] | None:
    """Re-run the finalists and the baseline ``runs`` times in turn; record and return the
    confirmation (``run``: how a window is measured; the strategy benchmark serves its stored
    windows through it)."""
    base = baseline_trial(study)
    finals = finalists(study, max(1, top))
    if runs < 1 or not finals or base is None:
        return None
    entries = [(f"trial {t.number}", t) for t in finals]
    if base.number not in {t.number for t in finals}:
        entries.append(("baseline", base))
    figures: dict[int, list[float]] = {t.number: [] for _, t in entries}
    failures: list[str] = []
    log.info("confirming: re-running trials %s%s %d time(s) each, in turn",
             ", ".join(str(t.number) for t in finals),
             "" if entries[-1][0] != "baseline" else f" and the baseline (trial {base.number})", runs)
    for i in range(runs):
        for name, trial in entries:
            res = run(_request(setup, trial_attrs(trial)["knobs"]),
                             setup.out_dir / "confirm" / f"{i}-{trial.number}",
                             stop_requested=lambda: stop.reason if stop else None)
            if res.ok:
                figures[trial.number].append(setup.objective(res, trial_attrs(trial)["knobs"]))
            else:
                failures.append(f"{name} run {i}: {res.outcome}: {res.error}")
    medians = {n: statistics.median(v) for n, v in figures.items()
               if v and n in {t.number for t in finals}}
    if not medians:
        log.warning("confirmation failed: %s", "; ".join(failures))
        record: dict[str, Any] = {"finalists": [t.number for t in finals], "failures": failures}
        set_study_attrs(study, {"confirmation": record})
        return record
    winner = max(medians, key=lambda n: medians[n])
    b_runs = figures[base.number] or figures[winner]
    record = {
        "finalists": [t.number for t in finals],
        "runs": {str(n): [round(v, 3) for v in figures[n]] for n in figures},
        "best_trial": winner,
        "baseline_trial": base.number,
        "best_runs": [round(v, 3) for v in figures[winner]],
        "baseline_runs": [round(v, 3) for v in b_runs],
        "best_samples_per_sec": round(medians[winner], 3),
        "baseline_samples_per_sec": round(statistics.median(b_runs), 3),
        "failures": failures,
    }
    record["speedup"] = round(record["best_samples_per_sec"] / record["baseline_samples_per_sec"], 3)
    set_study_attrs(study, {"confirmation": record})
    search_best = best_trial(study)
    log.info("confirmed: trial %d, %s samples/s (runs %s); baseline %s (runs %s): %.2fx%s",
             winner, record["best_samples_per_sec"], record["best_runs"],
             record["baseline_samples_per_sec"], record["baseline_runs"], record["speedup"],
             "" if search_best is None or search_best.number == winner else
             f" (the search's fastest, trial {search_best.number}, re-ran at "
             f"{medians.get(search_best.number, 0):,.1f} samples/s)")
    return record
