"""What a shorter confirmation would have said, read from confirmations already run: for each
study kept by ``python -m benchmarks.confirmation --keep DIR``, the rounds cut to their first
``r``, and at each ``r`` the leader, its speedup's 95% interval over the baseline, whether that
interval is wide enough for the study to end "could not measure" (exit 4: wider than
IMPRECISE_FACTOR x the indifference zone on a budget-bound, undecided confirmation), and
whether the selection (search/confirmation/selection.py, as this checkout has it) had decided.

    python -m benchmarks.confirmation_replay DIR [--rounds 3 4 5 6] [--record]

It runs nothing: it replays the stored rounds (each study's ``confirmation`` record). The
question it answers is the one a budget relative to the search raises (a wall time at most
2.0x the search): the README's study on a 2-core CPU searches in ~2 minutes and its rounds
take 25-37 s, so a confirmation as long as the search is 3-4 rounds; what would those rounds
have exported, and at what width.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from autotune.diagnose.thresholds import IMPRECISE_FACTOR
from autotune.results.intervals import t975
from autotune.search.confirmation import selection
from autotune.search.confirmation.selection import Selection
from benchmarks.record import command, publish


@dataclass(frozen=True)
class Finalist:
    """A finalist's rounds as the selection reads them (selection.Compared)."""

    number: int
    runs: tuple[float | None, ...]
    busy: tuple[bool, ...]


def studies(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each kept study's name and its confirmation record, in name order."""
    out = []
    for db in sorted(root.glob("*/*/study.db")):
        url = f"sqlite:///{db}"
        for name in optuna.get_all_study_names(url):
            conf = optuna.load_study(study_name=name, storage=url).user_attrs.get("confirmation")
            if conf:
                out.append((name, conf))
    return out


def interval(runs: list[float | None], base: list[float | None],
             busy: list[bool]) -> tuple[float, float, int] | None:
    """The geometric-mean speedup and its relative 95% half-width over the quiet rounds."""
    logs = [math.log(a / b) for a, b, x in zip(runs, base, busy, strict=False) if a and b and not x]
    if len(logs) < 3:
        return None
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(statistics.fmean(logs)), math.expm1(half), len(logs)


def at_rounds(conf: dict[str, Any], r: int, zone: float | None = None) -> str:
    """One cell: the leader at ``r`` rounds, its interval's half-width, exit 4 or not, and the
    selection's state (at ``zone``, the study's own indifference where None)."""
    base_key = str(conf["baseline_trial"])
    runs, busy_all = conf["runs"], conf.get("contended") or {}
    if len(runs[base_key]) < r:
        return "-"
    base = runs[base_key][:r]
    figures = {}
    for key, vals in runs.items():
        if key == base_key:
            continue
        busy = [a or b for a, b in zip((busy_all.get(key) or [False] * len(vals))[:r],
                                       (busy_all.get(base_key) or [False] * len(vals))[:r],
                                       strict=False)]
        iv = interval(vals[:r], base, busy)
        if iv:
            figures[key] = iv
    if not figures:
        return "no interval"
    lead = max(figures, key=lambda k: figures[k][0])
    point, half, _ = figures[lead]
    sel = Selection.from_dict(conf["selection"])
    if zone is not None:
        sel = replace(sel, zone=zone)
    cands = [Finalist(int(k), tuple(v[:r]), tuple((busy_all.get(k) or [False] * len(v))[:r]))
             for k, v in runs.items() if k != base_key]
    left = selection.survivors(cands, sel)
    state = "decided" if selection.resolved(left, sel) else f"{len(left)} undecided"
    wide = half > IMPRECISE_FACTOR * sel.zone
    return (f"trial {lead} {point:.2f}x +-{100 * half:.0f}%{' (exit 4)' if wide else ''}, "
            f"{state}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a --keep folder of benchmarks.confirmation")
    ap.add_argument("--rounds", type=int, nargs="+", default=[3, 4, 5, 6])
    ap.add_argument("--indifference", type=float, default=None,
                    help="the selection's zone for the replay (default: each study's own)")
    ap.add_argument("--record", action="store_true", help="put the table in docs/benchmarks.md")
    args = ap.parse_args(argv)
    found = studies(args.root)
    head = ["study", "rounds run (stopped)", "exported",
            *(f"at {r} rounds" for r in args.rounds)]
    zone = ("" if args.indifference is None
            else f" at study.indifference={args.indifference:g}")
    lines = [f"## A shorter confirmation, replayed on the rounds of {args.root.name}{zone}", "",
             f"Command: `{command('benchmarks.confirmation_replay', argv)}` (runs nothing: the "
             "stored rounds cut to their first r; 'exit 4': the leader's interval wider than "
             f"{IMPRECISE_FACTOR:g} x the zone, which a budget-bound undecided confirmation "
             "reports as could-not-measure; results/trust.py's exception for a noisy baseline alone is "
             "not applied here).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, conf in found:
        exported = f"trial {conf['best_trial']} {conf.get('speedup_text', '')}"
        cells = [name, f"{conf['rounds']} ({conf['stopped']})", exported,
                 *(at_rounds(conf, r, args.indifference) for r in args.rounds)]
        lines.append("| " + " | ".join(cells) + " |")
    publish(lines, args.record)


if __name__ == "__main__":
    main()
