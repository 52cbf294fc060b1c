"""A study as it runs today beside the same study under ``study.time_budget_s``: does the
budget hold the wall time to about 1.5x the search, and does the answer stay the one the uncut
study gives?

    python -m benchmarks.time_budget [--workload resnet18] [--ratio 1.5] [--record]

Run from the repository's root. The first study is the README's command as a user types it
(plus a study name and a temporary out_dir); the second is the same command with
``study.time_budget_s`` set to ``ratio`` x the first study's measured search time, so that it
may spend on everything what the first spent searching, and half that again. Both run on the
same seed. The table compares wall time, each phase, trials, the exported knobs and the
speedup's interval; ``--record`` puts it at the top of docs/benchmarks.md with the machine,
the date and the command.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna
import yaml

from benchmarks.record import command, machine, publish


def run_study(workload: str, name: str, out: Path, extra: list[str]) -> dict[str, Any]:
    """One study through the command line; its best.yaml, and the command that ran it."""
    cmd = [sys.executable, "-m", "autotune", f"workload={workload}", f"study.name={name}",
           f"study.out_dir={out}", *extra]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    best = out / name / "best.yaml"
    if not best.exists():
        raise SystemExit(f"{' '.join(cmd)} exported nothing (exit {proc.returncode}):\n"
                         f"{proc.stderr[-3000:]}")
    doc = yaml.safe_load(best.read_text())
    doc["_exit"], doc["_command"] = proc.returncode, " ".join(cmd[2:])
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / name / 'study.db'}")
    doc["_baseline_knobs"] = study.trials[0].user_attrs["knobs"]
    return doc


def phase_seconds(doc: dict[str, Any]) -> dict[str, float]:
    wall = doc["study"]["wall"]
    return {k: float(v["measured_s"]) for k, v in (wall.get("phases") or {}).items()}


def interval(doc: dict[str, Any]) -> tuple[float, float, float] | None:
    conf = doc.get("confirmation") or {}
    best = str(doc.get("best_trial"))
    iv = (conf.get("intervals") or {}).get(best)
    if not iv or iv.get("ci_low") is None:
        return None
    return float(iv["speedup"]), float(iv["ci_low"]), float(iv["ci_high"])


def row(label: str, doc: dict[str, Any], base_knobs: dict[str, Any]) -> str:
    phases = phase_seconds(doc)
    wall = float(doc["study"]["wall"]["measured_s"])
    iv = interval(doc)
    changed = {k: v for k, v in doc["knobs"].items() if base_knobs.get(k) != v}
    speed = (f"{iv[0]:.2f}x ({iv[1]:.2f}-{iv[2]:.2f})" if iv else doc.get("speedup_text") or "-")
    expected = doc["study"]["wall"].get("expected_s")
    said = f"{expected:.0f} ({100 * (wall / expected - 1):+.0f}%)" if expected else "-"
    return (f"| {label} | {doc['study']['trials']} | {phases.get('search', 0):.0f} | "
            f"{phases.get('confirmation', 0):.0f} | {phases.get('numerics check', 0):.0f} | "
            f"{wall:.0f} | {said} | {wall / max(phases.get('search', 1.0), 1e-9):.2f} | {speed} | "
            f"{', '.join(f'{k}={v}' for k, v in changed.items()) or 'none'} | {doc['_exit']} |")


def verdict(uncut: dict[str, Any], cut: dict[str, Any]) -> list[str]:
    """Whether the budgeted study's answer stays the uncut one's: its knobs, its point inside
    the uncut interval, its interval's width."""
    out = []
    a, b = interval(uncut), interval(cut)
    out.append("same exported knobs" if uncut["knobs"] == cut["knobs"] else
               "different exported knobs")
    if a and b:
        out.append(f"the budgeted study's speedup {b[0]:.2f}x is "
                   + ("inside" if a[1] <= b[0] <= a[2] else "outside")
                   + f" the uncut study's interval ({a[1]:.2f}-{a[2]:.2f}x)")
        wa, wb = a[2] / a[1], b[2] / b[1]
        out.append(f"interval width (high/low) {wb:.2f} against {wa:.2f} "
                   f"({100 * (wb - 1) / max(wa - 1, 1e-9) - 100:+.0f}% of the uncut one's)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="resnet18")
    ap.add_argument("--ratio", type=float, default=1.5)
    ap.add_argument("--record", action="store_true", help="add the section to docs/benchmarks.md")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="time-budget-") as tmp:
        out = Path(tmp)
        uncut = run_study(a.workload, "uncut", out, [])
        budget = round(a.ratio * phase_seconds(uncut)["search"])
        cut = run_study(a.workload, "budget", out, [f"study.time_budget_s={budget}"])
    base = uncut["_baseline_knobs"]
    lines = [
        f"## A study under study.time_budget_s ({datetime.date.today()}, {a.workload})",
        "",
        f"{machine(uncut)} Command: `{command('benchmarks.time_budget')}`: "
        f"`{uncut['_command']}`, then the same with `study.time_budget_s={budget}` "
        f"({a.ratio:g}x the first study's search).",
        "",
        "| study | trials | search s | confirmation s | numerics s | wall s | expected s (miss) "
        "| wall / search | speedup (95% CI) | exported knobs changed | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        row("as today", uncut, base),
        row(f"time_budget_s={budget}", cut, base),
        "",
        "- " + "; ".join(verdict(uncut, cut)),
        f"- budget: {((cut['study'].get('time_budget') or {}).get('words')) or '-'}",
        "",
    ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
