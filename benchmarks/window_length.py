"""What shorter confirmation windows would have measured, read from confirmations already run:
for each study kept by ``python -m benchmarks.confirmation --keep DIR``, every round's windows
cut to their first ``k`` chunks (a window records its throughput chunk by chunk), and for each
finalist the round-to-round spread of log(finalist / baseline) over the quiet rounds, its mean
(the speedup those windows would report), and what a round of such windows costs.

    python -m benchmarks.window_length DIR [--chunks 1 2 3 4] [--record]

It runs nothing. The question is where a confirmation round's noise comes from: if it is the
averaging inside a window, a shorter window is noisier in proportion and saves nothing; if it
is each window's own offset (its process, where its threads land, what the machine did that
second), a shorter window is about as informative per round and costs less per round, and a
confirmation could run more rounds in the same wall time. The mean shows what the shorter
window would cost in accuracy (a bias against the full window's figure).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.record import command, publish


def windows(study: Path) -> dict[int, dict[int, dict[str, Any]]]:
    """Each trial's confirmation windows by round (``confirm/<round>-<trial>/result.json``),
    the completed ones only."""
    out: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
    for result in study.glob("confirm/*-*/result.json"):
        rnd, trial = result.parent.name.split("-")
        doc = json.loads(result.read_text())
        if doc.get("outcome") == "ok" and doc.get("chunks"):
            out[int(trial)][int(rnd)] = doc
    return out


def figure(doc: dict[str, Any], k: int) -> float:
    """The window's throughput over its first ``k`` chunks. A window records its throughput
    at each chunk edge from its start (measure/figures.report_chunks: cumulative, what the
    pruner reads), so this is the ``k``-th figure; the last is the whole window's. (Until
    2026-12-02 this took the harmonic mean of the first ``k`` figures, which weighs the early
    edges again: the section recorded then is replaced by the one this prints.)"""
    chunks = doc["chunks"]
    return float(chunks[min(k, len(chunks)) - 1])


def seconds(doc: dict[str, Any], k: int) -> float:
    """What the window cut to ``k`` chunks would have taken: its warm-up and that share of its
    measured seconds."""
    share = min(1.0, k / len(doc["chunks"]))
    return float(doc.get("warmup_s") or 0.0) + share * float(doc["measure_s"])


def quiet(doc: dict[str, Any]) -> bool:
    return not (doc.get("contention") or {}).get("contended")


def row(runs: dict[int, dict[int, dict[str, Any]]], base: int, trial: int,
        k: int) -> tuple[float, float, int] | None:
    """(spread, mean) of log(trial / baseline) over the quiet rounds both ran, and their count."""
    logs = [math.log(figure(doc, k) / figure(runs[base][rnd], k))
            for rnd, doc in runs[trial].items()
            if rnd in runs[base] and quiet(doc) and quiet(runs[base][rnd])]
    if len(logs) < 3:
        return None
    return statistics.stdev(logs), statistics.fmean(logs), len(logs)


def study_lines(study: Path, ks: list[int]) -> list[str]:
    runs = windows(study)
    if 0 not in runs:
        return []
    base = 0
    full = max(len(d["chunks"]) for trial in runs.values() for d in trial.values())
    cost = {k: statistics.fmean(seconds(d, k) for trial in runs.values() for d in trial.values())
            for k in [*ks, full]}
    lines = []
    for trial in sorted(t for t in runs if t != base):
        whole = row(runs, base, trial, full)
        if whole is None:
            continue
        cells = [study.name, f"trial {trial} ({whole[2]} quiet rounds)",
                 f"{100 * whole[0]:.1f}%, {math.exp(whole[1]):.2f}x"]
        for k in ks:
            got = row(runs, base, trial, k)
            # What a second of rounds buys against the whole window: 1 / (spread² x seconds).
            gain = (whole[0] ** 2 * cost[full]) / (got[0] ** 2 * cost[k]) if got else 0.0
            cells.append("-" if got is None else
                         f"{100 * got[0]:.1f}%, {math.exp(got[1]):.2f}x "
                         f"({100 * (math.exp(got[1] - whole[1]) - 1):+.0f}%), {gain:.2f}x per s")
        lines.append("| " + " | ".join(cells) + " |")
    costs = ", ".join(f"{k} chunk{'s' * (k > 1)}: {cost[k]:.1f} s" for k in ks)
    lines.append(f"| {study.name} | a window's mean seconds (warm-up included) | "
                 f"whole: {cost[full]:.1f} s | {costs} |" + " |" * (len(ks) - 1))
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a --keep folder of benchmarks.confirmation")
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--record", action="store_true", help="put the table in docs/benchmarks.md")
    args = ap.parse_args(argv)
    head = ["study", "finalist", "whole window: spread, speedup",
            *(f"first {k} chunk{'s' * (k > 1)}: spread, speedup (against whole), "
              "information per second of rounds against whole"
              for k in args.chunks)]
    dbs = sorted(args.root.glob("*/*/study.db"))
    when = sorted(datetime.datetime.fromtimestamp(db.stat().st_mtime, datetime.UTC)
                  for db in dbs)
    measured = (f"{when[0]:%Y-%m-%d %H:%M}-{when[-1]:%H:%M} UTC" if when else "no study")
    lines = [f"## Shorter confirmation windows, replayed on the windows of {args.root.name}", "",
             f"Command: `{command('benchmarks.window_length', argv)}` on the windows its "
             f"studies measured ({measured}, their study.db last written). It runs nothing: every "
             "confirmation window's chunks cut to their first k; spread: the SD of "
             "log(finalist / baseline) from round to round over the rounds where neither "
             "window was contended; speedup: their geometric mean.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for db in dbs:
        lines += study_lines(db.parent, args.chunks)
    publish(lines, args.record)


if __name__ == "__main__":
    main()
