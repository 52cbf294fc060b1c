"""Do several studies' exports really differ, and does a speedup hold from one period to the next?

Repeated studies of one workload can export configurations that differ in a knob or two
(five idle runs of the README's command exported batch 64 or 128, 0 or 1 worker).
Each study's interval says how sure it is *within its own minutes*; it cannot see a shift that
lasts the whole study. This measures the exports and the first study's baseline side by side
in randomized interleaved rounds (as confirmation does, through the same trial window), in
``--sessions`` sessions ``--gap`` seconds apart, and states:

- each export's speedup over the baseline per session (95% interval) and over all rounds, beside
  what its own study claimed;
- how far one configuration's speedup moves between sessions, against the width of the
  interval a session states (a between-period term the study's interval does not carry);
- each export against the fastest of them, paired over all rounds: which differ at all.

    python -m benchmarks.exports_side_by_side S1/best.yaml S2/best.yaml ... --rounds 8 \\
        --sessions 3 --gap 60 [--record]

Run it from the repository's root, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import time
from pathlib import Path
from typing import Any

from autotune.results.intervals import Interval, paired_speedup
from benchmarks.record import command, prepend_section
from benchmarks.reproduce import Side, interleaved, study_sides

BASELINE = "baseline"


def load_sides(paths: list[Path]) -> tuple[dict[str, Any], dict[str, Side], dict[str, str]]:
    """The first study's request and baseline, each export (by study name; an export whose
    knobs repeat an earlier one's is measured once, under the first name), and each study's
    own claim. Every study must have measured the same workload with the same window."""
    request: dict[str, Any] = {}
    sides: dict[str, Side] = {}
    claims: dict[str, str] = {}
    for path in paths:
        doc, req, exported, baseline = study_sides(path)
        if not request:
            request, sides[BASELINE] = req, baseline
        elif (req["workload"], req["window"]) != (request["workload"], request["window"]):
            raise SystemExit(f"{path}: another workload or window than {paths[0]}'s: the "
                             "exports are compared under one study's measurement")
        name = str(doc["study"]["name"])
        if any(s.knobs == exported.knobs for s in sides.values()):
            print(f"{name}: same knobs as an export already listed; measured once", flush=True)
            continue
        sides[name] = exported
        claims[name] = str(doc.get("speedup_text"))
    return request, sides, claims


def pooled(sessions: list[dict[str, list[float]]], a: str, b: str) -> Interval:
    """``a`` over ``b`` paired over the rounds of every session."""
    return paired_speedup([x for s in sessions for x in s[a]],
                          [x for s in sessions for x in s[b]])


def report(sessions: list[dict[str, list[float]]], claims: dict[str, str],
           head: str) -> str:
    """The markdown: per-export speedups by session, the between-session spread, and each
    export against the fastest (paired over all rounds)."""
    names = list(claims)
    lines = [head, "",
             "| export | its study said | " + " | ".join(
                 f"session {i + 1}" for i in range(len(sessions)))
             + " | all rounds | sessions' spread | a session's interval (median half-width) |",
             "|---" * (len(sessions) + 5) + "|"]
    for n in names:
        per = [paired_speedup(s[n], s[BASELINE]) for s in sessions]
        points = [iv.point for iv in per]
        spread = max(points) / min(points) - 1 if min(points) > 0 else float("nan")
        half = sorted(iv.half_width for iv in per)[len(per) // 2]
        lines.append(f"| {n} | {claims[n]} | " + " | ".join(iv.text() for iv in per)
                     + f" | {pooled(sessions, n, BASELINE).text()} | {spread:+.1%} | "
                     f"+-{half:.1%} |")
    best = max(names, key=lambda n: pooled(sessions, n, BASELINE).point)
    lines += ["", f"Against the fastest over all rounds ({best}), paired:", ""]
    for n in names:
        if n != best:
            iv = pooled(sessions, n, best)
            verdict = ("cannot be told apart" if iv.low <= 1.0 <= iv.high
                       else f"{'slower' if iv.high < 1.0 else 'faster'} by "
                            f"{abs(1 - iv.point):.1%}")
            lines.append(f"- {n}: {iv.text()} of the fastest's speed: {verdict}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("best_yaml", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds per session")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--gap", type=float, default=60.0, help="idle seconds between sessions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record", action="store_true", help="add the section to docs/benchmarks.md")
    a = ap.parse_args()
    request, sides, claims = load_sides(a.best_yaml)
    rng = random.Random(a.seed)
    sessions: list[dict[str, list[float]]] = []
    started = datetime.datetime.now(datetime.timezone.utc)
    for i in range(a.sessions):
        if i:
            time.sleep(a.gap)
        print(f"session {i + 1} of {a.sessions}", flush=True)
        sessions.append(interleaved(request, sides, a.rounds, rng))
    minutes = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    cpu = platform.processor() or platform.machine()
    head = (f"## Exports side by side ({started:%Y-%m-%d %H:%M} UTC, {cpu}, {minutes:.1f} min)"
            f"\n\n`{command('benchmarks.exports_side_by_side')}`; the first study's baseline; "
            f"workload `{json.dumps(request['workload'], sort_keys=True)}`.")
    text = report(sessions, claims, head)
    print(text)
    if a.record:
        prepend_section(text)


if __name__ == "__main__":
    main()
