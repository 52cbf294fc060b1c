"""Does a study's best configuration reproduce its measured speed when run alone?

Re-runs best.yaml's knobs through the same trial window (a fresh subprocess each time), with
the study's own window settings, and compares samples/sec with the figure the study recorded.

    python benchmarks/reproduce.py studies/resnet18-cpu/best.yaml --runs 3 [--record]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
from pathlib import Path

import optuna

import autotune
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.storage import open_storage

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("best_yaml")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--storage", help="study storage URL (default: study.db beside best.yaml)")
    ap.add_argument("--record", action="store_true", help="append the result to docs/benchmarks.md")
    a = ap.parse_args()
    path = Path(a.best_yaml)
    best = autotune.load_best(path)
    doc = best.document
    url = a.storage or f"sqlite:///{path.parent / 'study.db'}"
    study = optuna.load_study(study_name=doc["study"]["name"], storage=open_storage(url))
    trial = study.trials[doc["best_trial"]]
    request = json.loads((path.parent / "trials" / str(trial.number) / "request.json").read_text())
    baseline = next(t for t in study.trials if t.user_attrs.get("source") == "baseline")
    figures: dict[str, list[float]] = {"best": [], "baseline": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):  # alternate, so drift on the machine hits both alike
            for which, knobs in (("best", best.knobs), ("baseline", baseline.user_attrs["knobs"])):
                req = TrialRequest(workload=request["workload"], knobs=knobs,
                                   device=request["device"], window=request["window"],
                                   seed=request["seed"], cpu_sized=request["cpu_sized"])
                res = run_window(req, Path(tmp) / f"{which}{i}")
                if res.outcome != "ok":
                    raise SystemExit(f"{which} run {i}: {res.outcome}: {res.error}")
                figures[which].append(res.samples_per_sec)
                print(f"{which} run {i}: {res.samples_per_sec:,.1f} samples/s", flush=True)
    study_figure = doc["metrics"]["samples_per_sec"]
    med = statistics.median(figures["best"])
    base_med = statistics.median(figures["baseline"])
    line = (f"| {datetime.date.today()} | {doc['study']['name']} | {doc['device']['name']} | "
            f"{study_figure:,.1f} | {', '.join(f'{f:,.1f}' for f in figures['best'])} | "
            f"{100 * (med / study_figure - 1):+.1f}% | {doc['baseline']['samples_per_sec']:,.1f} | "
            f"{', '.join(f'{f:,.1f}' for f in figures['baseline'])} | "
            f"{doc['speedup']:.2f}x | {med / base_med:.2f}x |")
    print(f"best: study {study_figure:,.1f} samples/s, re-runs median {med:,.1f} "
          f"({100 * (med / study_figure - 1):+.1f}%); baseline re-runs median {base_med:,.1f}; "
          f"speedup re-measured {med / base_med:.2f}x (study: {doc['speedup']:.2f}x)")
    if a.record:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
