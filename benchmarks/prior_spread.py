"""The forecast's prior spread against the rounds' own, on kept studies (runs nothing).

As the search ends, the confirmation's rounds are forecast at a spread of log ratios of
sqrt(2) times the search windows' own noise (their two halves: forecast.prior_spread). This
reads, from studies kept by `benchmarks.confirmation --keep DIR`, that prior and the spread
the rounds then showed (the log ratios to the baseline, pooled over the finalists, each about
its own mean), leaving out studies with a contended window (not idle).

    python -m benchmarks.prior_spread /tmp/conf6 /tmp/conf7 /tmp/conf8
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
from pathlib import Path
from typing import Any


def _attrs(db: Path) -> dict[str, Any]:
    with sqlite3.connect(db) as con:
        rows = con.execute("select key, value_json from study_user_attributes").fetchall()
    return {k: json.loads(v) for k, v in rows}


def rounds_spread(runs: dict[str, list[float | None]], base: str) -> float:
    """The rounds' log ratios to the baseline, pooled over the finalists (forecast.ratio_spread
    without its prior)."""
    ss, df = 0.0, 0
    for n, vals in runs.items():
        if n == base:
            continue
        logs = [math.log(a / b) for a, b in zip(vals, runs[base], strict=False) if a and b]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return math.sqrt(ss / df) if df else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="folders of kept studies")
    args = ap.parse_args()
    ratios = []
    print("| study | halves | prior | rounds' spread | prior / rounds' | rounds |")
    print("|---|---|---|---|---|---|")
    for db in sorted(p for d in args.dirs for p in d.glob("*/*/study.db")):
        conf = _attrs(db).get("confirmation") or {}
        if not conf.get("runs"):
            continue
        if any(any(v) for v in (conf.get("contended") or {}).values()):
            print(f"| {db.parent.parent.parent.name}/{db.parent.name} | left out: a contended "
                  "window | | | | |")
            continue
        noise = float((conf.get("selection") or {}).get("window_noise") or 0.0)
        prior, real = math.sqrt(2) * noise, rounds_spread(conf["runs"], str(conf["baseline_trial"]))
        ratio = prior / real if noise and real > 0 else math.nan
        if math.isfinite(ratio):
            ratios.append(ratio)
        print(f"| {db.parent.parent.parent.name}/{db.parent.name} | {noise:.3f} | {prior:.3f} "
              f"| {real:.3f} | {ratio:.2f} | {conf['rounds']} ({conf.get('stopped')}) |")
    if ratios:
        print(f"\nprior / rounds' spread over {len(ratios)} studies with a known window noise: "
              f"{min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
