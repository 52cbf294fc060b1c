"""Does a study's exported configuration reproduce its measured speedup when run alone?

Re-measures best.yaml's knobs and the baseline's through the same trial window (a fresh
subprocess each), with the study's own window settings, in randomized interleaved rounds as
the study's confirmation does, and states the re-measured speedup with its 95% interval
(autotune/results/intervals.py) beside the study's: is the re-measured figure inside the
study's interval?

    python -m benchmarks.reproduce studies/resnet18-cpu/best.yaml --rounds 5 [--record]

Run from the repository's root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

import autotune
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.intervals import Interval, paired_speedup
from autotune.results.storage import open_storage
from benchmarks.record import command, prepend_section


@dataclass
class Side:
    """One configuration to re-measure: its knobs and gradient accumulation."""

    knobs: dict[str, Any]
    grad_accum: int = 1


def study_sides(best_yaml: Path, storage: str | None = None
                ) -> tuple[dict[str, Any], dict[str, Any], Side, Side]:
    """best.yaml's document, its baseline trial's request (workload, window, seed), and the
    exported and baseline configurations, as the study ran them."""
    best = autotune.load_best(best_yaml, check_environment=False)
    doc = best.document
    url = storage or f"sqlite:///{best_yaml.parent / 'study.db'}"
    study = optuna.load_study(study_name=doc["study"]["name"], storage=open_storage(url))
    baseline = next(t for t in study.trials if t.user_attrs.get("source") == "baseline")
    request = json.loads((best_yaml.parent / "trials" / str(baseline.number) / "request.json")
                         .read_text())
    return (doc, request, Side(best.knobs, int(doc.get("grad_accum") or 1)),
            Side(baseline.user_attrs["knobs"], int(request.get("grad_accum") or 1)))


def measure(request: dict[str, Any], side: Side, where: Path) -> float:
    """One confirmation-style window (no profile) of ``side`` under the study's request."""
    window = {**request["window"], "profile": False, "loader_profile": False}
    req = TrialRequest(workload=request["workload"], knobs=side.knobs, device=request["device"],
                       window=window, seed=request["seed"], cpu_sized=request["cpu_sized"],
                       env=request.get("env") or {}, grad_accum=side.grad_accum)
    res = run_window(req, where)
    if res.outcome != "ok":
        raise SystemExit(f"{where.name}: {res.outcome}: {res.error}")
    return float(res.samples_per_sec)


def interleaved(request: dict[str, Any], sides: dict[str, Side], rounds: int,
                rng: random.Random) -> dict[str, list[float]]:
    """``rounds`` rounds, each measuring every side once in a random order."""
    figures: dict[str, list[float]] = {k: [] for k in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            order = list(sides)
            rng.shuffle(order)
            for which in order:
                figures[which].append(measure(request, sides[which], Path(tmp) / f"{which}{i}"))
                print(f"round {i} {which}: {figures[which][-1]:,.1f} samples/s", flush=True)
    return figures


def reproduce(best_yaml: Path, rounds: int, storage: str | None = None,
              seed: int = 0) -> dict[str, Any]:
    """Rounds of (exported, baseline) windows in random order; the figures and the interval."""
    doc, request, exported, baseline = study_sides(best_yaml, storage)
    figures = interleaved(request, {"exported": exported, "baseline": baseline}, rounds,
                          random.Random(seed))
    iv = paired_speedup(figures["exported"], figures["baseline"])
    return {"doc": doc, "figures": figures, "interval": iv,
            "inside": _inside(iv, doc)}


def _inside(iv: Interval, doc: dict[str, Any]) -> bool | None:
    """Whether the re-measured speedup lies inside the study's interval. An exported baseline
    (no speedup supported) reproduces when the re-measured interval includes 1.0."""
    if doc.get("best_trial") == (doc.get("confirmation") or {}).get("baseline_trial"):
        return iv.low <= 1.0 <= iv.high
    ci = (doc.get("confirmation") or {}).get("intervals", {}).get(str(doc["best_trial"])) or {}
    if ci.get("ci_low") is None:
        return None
    return float(ci["ci_low"]) <= iv.point <= float(ci["ci_high"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("best_yaml")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--storage", help="study storage URL (default: study.db beside best.yaml)")
    ap.add_argument("--record", action="store_true", help="add the result to docs/benchmarks.md")
    a = ap.parse_args()
    out = reproduce(Path(a.best_yaml), a.rounds, a.storage)
    doc, iv, figs = out["doc"], out["interval"], out["figures"]
    line = (f"| {datetime.date.today()} | {doc['study']['name']} | {doc.get('speedup_text')} | "
            f"{iv.text()} | {statistics.median(figs['exported']):,.1f} / "
            f"{statistics.median(figs['baseline']):,.1f} | "
            f"{ {True: 'yes', False: 'no', None: 'no interval'}[out['inside']] } |")
    print(f"study: {doc.get('speedup_text')}; re-measured alone: {iv.text()}; inside the "
          f"study's interval: {out['inside']}")
    if a.record:
        prepend_section("\n".join([
            f"## A study's export re-measured alone ({datetime.date.today()})", "",
            f"    {command('benchmarks.reproduce')}", "",
            "| date | study | the study said | re-measured alone | exported / baseline, samples/s "
            "| inside the study's interval |", "|---|---|---|---|---|---|", line]))


if __name__ == "__main__":
    main()
