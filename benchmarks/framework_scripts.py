"""A Hugging Face ``HfArgumentParser`` + ``Trainer`` script and a Lightning script, each with
no autotune line, tuned by the one command and verified in the same launch
(docs/guide/script.md):

    autotune study.n_trials=N -- python train.py ARGS      # the study of the script as it is
    autotune verify studies/train-cpu --rounds R           # the speedup its launch realizes

``hf``: examples/hf_run_clm.py (a GPT-2 of 2 layers of 64 from its config, batch 8 x
accumulation 2); ``lightning``: examples/lightning_train.py (an MLP, batch 32 x accumulation
2). Each in an empty folder of its own. The section gives each exported speedup with its
interval, the knobs it changes, what verify realized and its share of the study's (the goal:
at least 0.8), and each command's wall time.

    python -m benchmarks.framework_scripts [--trials 8] [--rounds 5] [--only hf,lightning]
        [--keep DIR] [--record]

Run from the repository's root, on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.child_env import run_logged
from benchmarks.record import command, machine, publish

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.8
SCRIPTS = {
    "hf": ("hf_run_clm.py", ["--output_dir", "out", "--per_device_train_batch_size", "8",
                             "--gradient_accumulation_steps", "2", "--max_steps", "100000",
                             "--use_cpu", "true", "--report_to", "none",
                             "--learning_rate", "1e-3"]),
    "lightning": ("lightning_train.py", ["--batch-size", "32", "--max-steps", "100000"]),
}


def side(kind: str, folder: Path, trials: int, rounds: int) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    script, args = SCRIPTS[kind]
    shutil.copy(ROOT / "examples" / script, folder / "train.py")
    study_s = run_logged([sys.executable, "-m", "autotune", f"study.n_trials={trials}", "--",
                    "python", "train.py", *args], folder, folder / "study.log")
    verify_s = run_logged([sys.executable, "-m", "autotune", "verify", "studies/train-cpu",
                     "--rounds", str(rounds)], folder, folder / "verify.log")
    study = folder / "studies" / "train-cpu"
    best = yaml.safe_load((study / "best.yaml").read_text())
    base = json.loads((study / "trials" / str(
        (best.get("confirmation") or {}).get("baseline_trial", 0)) / "request.json").read_text())
    changed = ", ".join(f"{k}={v}" for k, v in best["knobs"].items()
                        if base["knobs"].get(k) != v) or "none"
    return {"best": best, "verified": json.loads((study / "verify.json").read_text()),
            "study_s": study_s, "verify_s": verify_s, "changed": changed,
            "command": f"python train.py {' '.join(args)}"}


def _share(best: dict[str, Any], verified: dict[str, Any]) -> str:
    ratio = verified.get("ratio")
    if not best.get("speedup") or float(best["speedup"]) <= 1.0 or ratio is None:
        return "no speedup exported"
    return f"{ratio:.0%} ({'at or above' if ratio >= GOAL else 'BELOW'} the {GOAL:.0%} goal)"


def section(sides: dict[str, dict[str, Any]], trials: int, rounds: int) -> list[str]:
    first = next(iter(sides.values()))["best"]
    lines = [f"## Hugging Face and Lightning scripts tuned with no changed line "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"    {command('benchmarks.framework_scripts')}", "",
             machine(first) + " Idle, nothing else ran. Each script copied as `train.py` "
             f"into an empty folder; `autotune study.n_trials={trials} -- <its command>`, then "
             f"`autotune verify studies/train-cpu --rounds {rounds}` (each side its command, "
             "ending at its window).", "",
             "| script | its command | study | exported (95% CI) | knobs changed | verify "
             "realized | share of the study's | verify |",
             "|---|---|---|---|---|---|---|---|"]
    for kind, m in sides.items():
        lines.append(f"| {SCRIPTS[kind][0]} | `{m['command']}` | {m['study_s'] / 60:.1f} min "
                     f"| {m['best'].get('speedup_text')} | {m['changed']} "
                     f"| {m['verified'].get('realized_text')} "
                     f"| {_share(m['best'], m['verified'])} | {m['verify_s'] / 60:.1f} min |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="hf,lightning")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="framework-scripts-") as tmp:
        root = (a.keep or Path(tmp)).resolve()
        sides = {k: side(k, root / k, a.trials, a.rounds) for k in a.only.split(",")}
        publish(section(sides, a.trials, a.rounds), a.record)


if __name__ == "__main__":
    main()
