"""Re-measuring the winner: the best trial and the baseline, run again, alternately.

The best of N noisy trials is biased upward (it won partly by luck), and a baseline measured
once at the start is exposed to whatever the machine was doing then. So after the search the
best configuration and the baseline are re-run in fresh windows, interleaved so that drift
hits both alike, and best.yaml reports the medians of these runs, their spread, and the speedup
between them: figures a production run can expect to reproduce.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

import optuna

from autotune.export import baseline_trial, best_trial
from autotune.runner import TrialRequest, run_window
from autotune.study import StopFlag, StudySetup

log = logging.getLogger("autotune")


def _request(setup: StudySetup, knobs: dict[str, Any]) -> TrialRequest:
    return TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                        window=setup.window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                        env=setup.worker_env)


def confirm(setup: StudySetup, study: optuna.Study, runs: int,
            stop: StopFlag | None = None) -> dict[str, Any] | None:
    best, base = best_trial(study), baseline_trial(study)
    if runs < 1 or best is None or base is None:
        return None
    pairs = [("best", best)] if best.number == base.number else [("best", best), ("baseline", base)]
    figures: dict[str, list[float]] = {name: [] for name, _ in pairs}
    failures: list[str] = []
    log.info("confirming: re-running trial %d%s %d time(s), alternately", best.number,
             "" if len(pairs) == 1 else f" and the baseline (trial {base.number})", runs)
    for i in range(runs):
        for name, trial in pairs:
            res = run_window(_request(setup, trial.user_attrs["knobs"]),
                             setup.out_dir / "confirm" / f"{i}-{name}",
                             stop_requested=lambda: stop.reason if stop else None)
            if res.ok:
                figures[name].append(res.samples_per_sec)
            else:
                failures.append(f"{name} run {i}: {res.outcome}: {res.error}")
    if not figures["best"]:
        log.warning("confirmation failed: %s", "; ".join(failures))
        record: dict[str, Any] = {"best_trial": best.number, "failures": failures}
        study.set_user_attr("confirmation", record)
        return record
    b_runs = figures.get("baseline") or figures["best"]
    record = {
        "best_trial": best.number,
        "baseline_trial": base.number,
        "best_runs": [round(v, 3) for v in figures["best"]],
        "baseline_runs": [round(v, 3) for v in b_runs],
        "best_samples_per_sec": round(statistics.median(figures["best"]), 3),
        "baseline_samples_per_sec": round(statistics.median(b_runs), 3),
        "failures": failures,
    }
    record["speedup"] = round(record["best_samples_per_sec"] / record["baseline_samples_per_sec"], 3)
    study.set_user_attr("confirmation", record)
    log.info("confirmed: best %s samples/s (runs %s), baseline %s (runs %s): %.2fx",
             record["best_samples_per_sec"], record["best_runs"],
             record["baseline_samples_per_sec"], record["baseline_runs"], record["speedup"])
    return record
