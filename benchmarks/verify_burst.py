"""``autotune verify`` beside a short burst of other work: does one disturbed round move the
realized speedup, and does verify say so?

    python -m benchmarks.verify_burst [--trials 6] [--rounds 5] [--burst-round 2]
                                      [--burst "stress-ng --cpu 1 --timeout 20"]
                                      [--burst-delay 6] [--keep DIR] [--record]

Run from the repository's root, on an idle machine. It runs the README's study
(``autotune workload=resnet18``, CPU-sized without a GPU; ``--trials`` trials and a short
confirmation: verify's rounds are the subject), then ``autotune verify`` on it, and starts the
burst (through a shell that exits at once: another user's job, outside verify's process tree)
``--burst-delay`` seconds after the exported side of round ``--burst-round`` starts (its log
file appears): long enough to overlap the side's measured steps, not only its start-up. It prints each
round's two figures and what each side read of the machine's load, the realized speedup as
verify states it (the rounds that count: a round with a side that ran beside other work is
measured again and left out while 3 quiet rounds remain), and beside it what the first
``--rounds`` rounds give counted all, which is what verify stated before 2026-12-02.
``--record`` puts the section at the top of docs/benchmarks.md (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autotune.results.intervals import paired_speedup
from benchmarks.record import command, machine, publish

CLI = [sys.executable, "-c", "from autotune.cli.main import main; main()"]


def study(out: Path, trials: int) -> Path:
    """The README's study, fewer trials and a short confirmation; its folder (a kept one's
    where ``out`` holds it already). Exit 4 (could not measure: 60 s of rounds leave the
    interval wide on this CPU) exports best.yaml all the same, which is all verify needs."""
    folder = out / "studies" / "burst"
    if (folder / "best.yaml").exists():
        return folder
    args = ["workload=resnet18", "study.name=burst", f"study.n_trials={trials}",
            "study.confirm_budget_s=60"]
    proc = subprocess.run([*CLI, *args], cwd=out, capture_output=True, text=True)
    if proc.returncode not in (0, 4) or not (folder / "best.yaml").exists():
        raise SystemExit(f"the study failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return folder


def verify_with_burst(folder: Path, rounds: int, burst_round: int, burst: str,
                      delay: float) -> float:
    """Run verify; start ``burst`` ``delay`` seconds after the exported side of
    ``burst_round`` (1-based) starts. Returns when the burst started, in seconds after verify
    did (-1: it never did)."""
    trigger = folder / "verify" / f"{burst_round - 1}-exported.log"
    trigger.unlink(missing_ok=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([*CLI, "verify", str(folder), "--rounds", str(rounds)],
                            cwd=folder.parent.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    started, seen = -1.0, -1.0
    while proc.poll() is None:
        if seen < 0 and trigger.exists():
            seen = time.monotonic()
        if started < 0 <= seen and time.monotonic() - seen >= delay:
            subprocess.Popen(["sh", "-c", f"{burst} >/dev/null 2>&1 &"],
                             start_new_session=True).wait()
            started = time.monotonic() - t0
        time.sleep(0.2)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"verify failed ({proc.returncode}):\n{out[-3000:]}")
    print(out.strip().splitlines()[-1])
    return started


def load_words(figure: dict[str, Any]) -> str:
    load = figure.get("contention") or {}
    if not load:
        return "not read"
    head = (f"{load.get('other_cpu_cores')} other cores, wait {load.get('runqueue_wait_share')}, "
            f"steal {load.get('steal_share')}")
    return f"**contended**: {head}" if load.get("contended") else head


def report(doc: dict[str, Any], rounds: int, started: float, burst: str,
           burst_round: int, delay: float) -> list[str]:
    figs = doc["figures"]
    key = "samples_per_sec"
    lines = ["| round | baseline samples/s | exported samples/s | exported / baseline | "
             "baseline's load | exported's load | counted |", "|---|---|---|---|---|---|---|"]
    for i, (b, e) in enumerate(zip(figs["baseline"], figs["exported"], strict=False)):
        lines.append(f"| {i + 1} | {b[key]:.1f} | {e[key]:.1f} | {e[key] / b[key]:.3f} | "
                     f"{load_words(b)} | {load_words(e)} | "
                     f"{'yes' if i in doc['counted_rounds'] else 'no'} |")
    before = paired_speedup([f[key] for f in figs["exported"][:rounds]],
                            [f[key] for f in figs["baseline"][:rounds]])
    lines += ["", f"The burst (`{burst}`) started {started:.0f} s into verify, {delay:g} s after "
              f"the exported side of round {burst_round} started.", "",
              "| what | realized speedup (95% CI) | rounds |", "|---|---|---|",
              f"| verify as it states it now (the rounds that count) | {doc['realized_text']} | "
              f"{len(doc['counted_rounds'])} of {len(figs['exported'])} |",
              f"| the first {rounds} rounds counted all (verify before 2026-12-02) | "
              f"{before.text()} | {before.rounds} |",
              f"| the study's confirmed speedup | {doc['study_text']} | |"]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--burst-round", type=int, default=2)
    ap.add_argument("--burst", default="stress-ng --cpu 1 --timeout 20")
    ap.add_argument("--burst-delay", type=float, default=6.0,
                    help="seconds after the side starts: a README side on this project's CPU "
                         "VM starts and warms up for ~5 s, then measures for ~9 s, where a "
                         "burst from its start holds the warm-up until it ends: bursts of "
                         "20-45 s begun with the side ended just before its measured steps "
                         "(2026-12-02)")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="verify-burst-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    folder = study(out, args.trials)
    print(f"study: {time.monotonic() - t0:.0f} s", flush=True)
    started = verify_with_burst(folder, args.rounds, args.burst_round,
                                shlex.join(shlex.split(args.burst)), args.burst_delay)
    doc = json.loads((folder / "verify.json").read_text())
    best = yaml.safe_load((folder / "best.yaml").read_text())
    publish([f"## `autotune verify` beside a short burst of other work "
             f"({datetime.date.today()})", "",
             f"{machine(best)} Command: "
             f"`{command('benchmarks.verify_burst')}`. The README's study ({args.trials} "
             "trials, study.confirm_budget_s=60), then `autotune verify` on it with "
             f"--rounds {args.rounds} (the runtime API around the workload's own objects).", "",
             *report(doc, args.rounds, started, args.burst, args.burst_round,
                     args.burst_delay), "",
             f"verify's line: {doc['realized_text']}; disturbed: "
             + ("; ".join(f"round {d['round'] + 1} ({', '.join(d['sides'])})"
                          for d in doc["disturbed"]) or "none")], args.record)


if __name__ == "__main__":
    main()
