"""Does the nanoGPT-style tutorial's script get its study's speed (docs/guide/nanogpt.md)?

Runs the tutorial as a user would, in an empty folder: its study
(``python examples/nanogpt/workload.py study.n_trials=8``), then ``autotune verify --script
examples/nanogpt/train.py`` on it (``--rounds`` rounds of ``--steps`` steps), and reports the
speedup the script realized as a share of the study's confirmed one (the goal: at least
0.8). ``--record`` puts the section at the top of docs/benchmarks.md::

    python -m benchmarks.nanogpt_tutorial --record

Run from the repository's root, on an idle machine (the figures are speedups of one machine's
CPU or GPU: another job's load changes both sides, not equally). ``--quick``: the tutorial's
smoke-test study, one verify round of 80 steps and no record, to check the script runs.
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
#: The share of the study's speedup the script must realize.
GOAL = 0.8


def _run(args: list[str], cwd: Path, log: Path) -> float:
    """One command of the tutorial in ``cwd``; its output to ``log``; its seconds."""
    return run_logged(args, cwd, log, ok=(0,))


def measure(folder: Path, trials: int, rounds: int, steps: int, quick: bool) -> dict[str, Any]:
    """The study and verify in ``folder``: their figures and wall times."""
    study = ([sys.executable, str(TUTORIAL / "workload.py")]
             + (["--quick"] if quick else [f"study.n_trials={trials}"]))
    study_s = _run(study, folder, folder / "study.log")
    best_path = folder / "studies" / "nanogpt" / "best.yaml"
    verify = [sys.executable, "-m", "autotune", "verify", str(best_path.parent), "--rounds",
              str(rounds), "--script", str(TUTORIAL / "train.py"), "--steps", str(steps)]
    verify_s = _run(verify, folder, folder / "verify.log")
    best = yaml.safe_load(best_path.read_text())
    verified = json.loads((best_path.parent / "verify.json").read_text())
    number = (best.get("confirmation") or {}).get("baseline_trial", 0)
    request = best_path.parent / "trials" / str(number) / "request.json"
    baseline = json.loads(request.read_text())["knobs"]
    changed = {k: v for k, v in best["knobs"].items() if baseline.get(k) != v}
    shown = ["python", "examples/nanogpt/workload.py", *study[2:]]
    return {"best": best, "verified": verified, "changed": changed, "study_s": study_s,
            "verify_s": verify_s, "study": " ".join(shown)}


def section(m: dict[str, Any], rounds: int, steps: int) -> list[str]:
    best, verified = m["best"], m["verified"]
    ratio = verified.get("ratio")
    changed = ", ".join(f"{k}={v}" for k, v in m["changed"].items()) or "nothing changed"
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    verdict = ("no speedup was exported, so there is nothing to realize" if not best.get("speedup")
               or float(best["speedup"]) <= 1.0 else
               f"{ratio:.0%} of the study's speedup, " + ("at or above" if ratio >= GOAL
                                                          else "BELOW") + f" the {GOAL:.0%} goal")
    return [
        f"## The nanoGPT-style tutorial's script against its study ({time.strftime('%Y-%m-%d')})",
        "", f"    {command('benchmarks.nanogpt_tutorial')}", "",
        machine(best) + f" Load average {load} when it ended.", "",
        f"docs/guide/nanogpt.md as written: `{m['study']}` ({m['study_s'] / 60:.1f} min), "
        f"then `autotune verify "
        f"studies/nanogpt --rounds {rounds} --script examples/nanogpt/train.py --steps "
        f"{steps}` ({m['verify_s'] / 60:.1f} min). Exported: {changed}.", "",
        "| | speedup |", "|---|---|",
        f"| the study (confirmed) | {best.get('speedup_text')} |",
        f"| train.py under `verify --script` | {verified['realized_text']} |",
        f"| realized share | {verdict} |", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="a smoke test: no record")
    ap.add_argument("--keep", type=Path, help="run in this folder (kept) instead of a temporary one")
    ap.add_argument("--record", action="store_true", help="add the section to docs/benchmarks.md")
    a = ap.parse_args()
    rounds, steps = (1, 80) if a.quick else (a.rounds, a.steps)
    with tempfile.TemporaryDirectory(prefix="nanogpt-tutorial-") as tmp:
        folder = a.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        m = measure(folder.resolve(), a.trials, rounds, steps, a.quick)
        publish(section(m, rounds, steps), a.record and not a.quick)


if __name__ == "__main__":
    main()
