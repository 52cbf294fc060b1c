"""Does the diagnosis agent find the best configuration in fewer trials than TPE alone?

Runs the same study (sleeping-loader workload, CPU, same seed and budget) with study.agent=true
and study.agent=false, for several seeds, and counts for each the trials needed until the best
so far is within 5% of the best either run found. Appends the table to docs/benchmarks.md.

    python benchmarks/agent_vs_sampler.py --trials 16 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.child_env import child_env  # noqa: E402

WORKLOAD = "tests.workloads_diag.SleepyLoaderWorkload"
WINDOW = ["window.warmup_steps=2", "window.measure_steps=12", "window.measure_seconds=3",
          "window.min_measure_steps=4", "window.profile=true", "window.profile_steps=2"]


def run_study(agent: bool, seed: int, trials: int, workdir: Path) -> list[tuple[float | None, int]]:
    """Each trial's samples/sec (None unless it completed cleanly) and its worker count."""
    name = f"agent-{agent}-seed{seed}"
    args = [f"workload._target_={WORKLOAD}", "device=cpu", f"study.name={name}",
            f"study.n_trials={trials}", f"study.agent={str(agent).lower()}", f"seed={seed}",
            *WINDOW]
    env = child_env()
    subprocess.run([sys.executable, "-c", "from autotune.cli.main import main; main()", *args],
                   cwd=workdir, env=env, check=True, stdout=subprocess.DEVNULL)
    study = optuna.load_study(study_name=name,
                              storage=f"sqlite:///{workdir}/studies/{name}/study.db")
    return [(t.value if t.state.name == "COMPLETE" and t.user_attrs.get("outcome") == "ok"
             else None, int((t.user_attrs.get("knobs") or {}).get("num_workers", 0)))
            for t in study.get_trials()]


def trials_to_reach(values: list[float | None], target: float) -> int | None:
    best = 0.0
    for i, v in enumerate(values, start=1):
        best = max(best, v or 0.0)
        if best >= target:
            return i
    return None


def best_of(trials: list[tuple[float | None, int]]) -> tuple[float, int]:
    """The best samples/sec and the worker count it ran with."""
    return max(((v or 0.0, w) for v, w in trials), default=(0.0, 0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--keep", metavar="DIR", help="keep the studies in DIR (default: a temporary "
                    "directory, deleted afterwards)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if a.keep:
            tmp = a.keep
            Path(tmp).mkdir(parents=True, exist_ok=True)
        for seed in a.seeds:
            on = run_study(True, seed, a.trials, Path(tmp))
            off = run_study(False, seed, a.trials, Path(tmp))
            (b_on, w_on), (b_off, w_off) = best_of(on), best_of(off)
            best = max(b_on, b_off)
            rows.append((seed, best, trials_to_reach([v for v, _ in on], 0.95 * best),
                         trials_to_reach([v for v, _ in off], 0.95 * best),
                         f"{b_on:,.1f} ({w_on})", f"{b_off:,.1f} ({w_off})"))
            print(rows[-1], flush=True)
    fmt = lambda n: "not reached" if n is None else str(n)  # noqa: E731
    lines = [
        "",
        f"### Agent vs sampler alone ({datetime.date.today()}, {platform.machine()} CPU, "
        f"{os.cpu_count()} cores, no GPU)",
        "",
        f"Command: `python benchmarks/agent_vs_sampler.py --trials {a.trials} --seeds "
        f"{' '.join(map(str, a.seeds))}` (workload `{WORKLOAD}`: every item sleeps 10 ms; "
        "trials counted until the best so far is within 5% of the best either run found).",
        "",
        "| seed | best samples/s (either) | trials, agent on | trials, agent off | best, agent on (workers) | best, agent off (workers) |",
        "|---|---|---|---|---|---|",
        *[f"| {s} | {b:,.1f} | {fmt(n_on)} | {fmt(n_off)} | {b_on} | {b_off} |"
          for s, b, n_on, n_off, b_on, b_off in rows],
        "",
    ]
    with open(a.out, "a") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
