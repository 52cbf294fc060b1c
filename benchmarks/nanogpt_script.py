"""The nanoGPT-style tutorial tuned from its ``train.py`` alone, beside the study of its
``Workload`` class, on the same machine and day (docs/guide/script.md; docs/guide/nanogpt.md):

1. ``workload``: ``python examples/nanogpt/workload.py study.n_trials=N`` (the tutorial's
   study, a Workload restating the script), then ``autotune verify studies/nanogpt --script
   examples/nanogpt/train.py --steps S`` (each side runs the script to its end);
2. ``script``: ``autotune study.name=nanogpt study.n_trials=N -- python
   examples/nanogpt/train.py --steps S`` (no workload.py: each trial is the script itself),
   then ``autotune verify studies/nanogpt`` (each side runs the script until its window is
   measured).

Each in an empty folder of its own. The section gives both exported speedups with their
intervals, what each verify realized as a share of its study's (the goal: at least 0.8), and
each command's wall time (a verify whose sides end at their window against one that runs the
script to its end).

    python -m benchmarks.nanogpt_script [--trials 8] [--rounds 5] [--steps 300] [--record]

Run from the repository's root, on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.child_env import run_logged
from benchmarks.record import command, machine, publish

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "examples" / "nanogpt"
GOAL = 0.8


def _changed(folder: Path, best: dict[str, Any]) -> str:
    number = (best.get("confirmation") or {}).get("baseline_trial", 0)
    request = folder / "studies" / "nanogpt" / "trials" / str(number) / "request.json"
    base = json.loads(request.read_text())["knobs"]
    return ", ".join(f"{k}={v}" for k, v in best["knobs"].items() if base.get(k) != v) or "none"


def side(kind: str, folder: Path, trials: int, rounds: int, steps: int) -> dict[str, Any]:
    """One way to tune the tutorial, in ``folder``: the study, then its verify."""
    folder.mkdir(parents=True, exist_ok=True)
    script = [sys.executable, str(TUTORIAL / "train.py"), "--steps", str(steps)]
    if kind == "workload":
        study = [sys.executable, str(TUTORIAL / "workload.py"), f"study.n_trials={trials}"]
        verify = [sys.executable, "-m", "autotune", "verify", "studies/nanogpt", "--rounds",
                  str(rounds), "--script", str(TUTORIAL / "train.py"), "--steps", str(steps)]
    else:
        study = [sys.executable, "-m", "autotune", "study.name=nanogpt",
                 f"study.n_trials={trials}", "--", *script]
        verify = [sys.executable, "-m", "autotune", "verify", "studies/nanogpt", "--rounds",
                  str(rounds)]
    study_s = run_logged(study, folder, folder / "study.log")
    verify_s = run_logged(verify, folder, folder / "verify.log")
    best = yaml.safe_load((folder / "studies" / "nanogpt" / "best.yaml").read_text())
    verified = json.loads((folder / "studies" / "nanogpt" / "verify.json").read_text())
    return {"best": best, "verified": verified, "study_s": study_s, "verify_s": verify_s,
            "changed": _changed(folder, best)}


def _share(best: dict[str, Any], verified: dict[str, Any]) -> str:
    ratio = verified.get("ratio")
    if not best.get("speedup") or float(best["speedup"]) <= 1.0 or ratio is None:
        return "no speedup exported"
    return f"{ratio:.0%} ({'at or above' if ratio >= GOAL else 'BELOW'} the {GOAL:.0%} goal)"


def section(sides: dict[str, dict[str, Any]], trials: int, rounds: int, steps: int
            ) -> list[str]:
    first = next(iter(sides.values()))["best"]
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    shown = {
        "workload": (f"`python examples/nanogpt/workload.py study.n_trials={trials}`",
                     f"`autotune verify studies/nanogpt --rounds {rounds} --script "
                     f"examples/nanogpt/train.py --steps {steps}`"),
        "script": (f"`autotune study.name=nanogpt study.n_trials={trials} -- python "
                   f"examples/nanogpt/train.py --steps {steps}`",
                   f"`autotune verify studies/nanogpt --rounds {rounds}`")}
    lines = [f"## nanoGPT's tutorial tuned from its train.py alone, beside its Workload study "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"    {command('benchmarks.nanogpt_script')}", "",
             machine(first) + f" Idle, nothing else ran; load average {load} when it ended. "
             "Each way in an empty folder of its own.", "",
             "| way | study | its time | exported (95% CI) | knobs changed | verify | its time "
             "| verify realized | share of the study's |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, m in sides.items():
        study, verify = shown[kind]
        lines.append(
            f"| {kind} | {study} | {m['study_s'] / 60:.1f} min | {m['best'].get('speedup_text')} "
            f"| {m['changed']} | {verify} | {m['verify_s'] / 60:.1f} min "
            f"| {m['verified'].get('realized_text')} | {_share(m['best'], m['verified'])} |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--only", default="workload,script")
    ap.add_argument("--keep", type=Path, help="run in this folder (kept)")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nanogpt-script-") as tmp:
        root = (a.keep or Path(tmp)).resolve()
        sides = {kind: side(kind, root / kind, a.trials, a.rounds, a.steps)
                 for kind in a.only.split(",")}
        publish(section(sides, a.trials, a.rounds, a.steps), a.record)


if __name__ == "__main__":
    main()
