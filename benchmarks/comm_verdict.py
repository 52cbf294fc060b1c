"""The communication verdict's two sides, run again and again: a compute-heavy model
with few parameters (tests/workloads_user.ConvHeavy, about 5,000 parameters, a ~180 ms step
on one core per rank) must not be called communication-bound, and a wide MLP (3 layers of
1024, little compute per sample) must be. Each run is a one-trial study of 2 ranks (gloo, one
core each): its baseline window and its all-reduce counterfactual (measure/comm.py), with the
median of the paired differences, their lower bound that the verdict reads, and DDP's own
timing of the all-reduce beside them.

    PYTHONPATH=. python benchmarks/comm_verdict.py [--runs 4] [--stress]

``--stress`` runs each study beside ``stress-ng --cpu 2`` (the machine busy). Appends a
section to docs/benchmarks.md (machine, date, command, each run's figures).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.history import prepend_section  # noqa: E402

WORKLOADS = {
    "ConvHeavy (5 k parameters)": ["workload._target_=tests.workloads_user.ConvHeavy"],
    "wide MLP (3 x 1024)": ["workload=mlp", "workload.hidden=1024", "workload.depth=3"],
}
COMMON = ["device=cpu", "launch.nproc_per_node=2", "study.n_trials=1", "study.confirm_runs=0",
          "study.numerics_steps=0", "window.profile=false"]
COLUMNS = ("bottleneck", "contended", "step_time_ms", "comm.exposed_share",
           "comm.exposed_share_low", "comm.exposed_ms", "comm.rank_gap_ms", "comm.ddp_comm_ms")


def one(args: list[str], out: Path, stress: bool) -> dict[str, str]:
    hog = subprocess.Popen(["stress-ng", "--cpu", "2"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) if stress else None
    try:
        subprocess.run([sys.executable, "-m", "autotune", *args, *COMMON, "study.name=v",
                        f"study.out_dir={out}"], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    finally:
        if hog:
            hog.terminate()
            hog.wait()
    with open(out / "v" / "trials.csv") as f:
        return list(csv.DictReader(f))[0]


def _f(x: Any, spec: str) -> str:
    try:
        return format(float(x), spec)
    except (TypeError, ValueError):
        return str(x or "-")


def section(rows: dict[str, list[dict[str, str]]], command: str, stress: bool) -> str:
    import torch

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"## The communication verdict, run again and again ({now}, "
             f"{platform.machine()}, 2 vCPUs, Python {platform.python_version()}, torch "
             f"{torch.__version__}, gloo, 2 ranks{', beside stress-ng --cpu 2' if stress else ''})",
             "", f"    {command}", "",
             "| workload | run | verdict | contended | step | all-reduce adds (median of pairs) "
             "| share | share's lower bound | ranks' gap | DDP's all-reduce |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in rows.items():
        for i, r in enumerate(runs):
            lines.append(
                f"| {name} | {i + 1} | {r['bottleneck']} | {r['contended']} | "
                f"{_f(r['step_time_ms'], '.1f')} ms | {_f(r['comm.exposed_ms'], '.1f')} ms | "
                f"{_f(100 * float(r['comm.exposed_share']), '.1f')}% | "
                f"{_f(100 * float(r['comm.exposed_share_low']), '.1f')}% | "
                f"{_f(r['comm.rank_gap_ms'], '.1f')} ms | {_f(r['comm.ddp_comm_ms'], '.1f')} ms |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--stress", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    rows: dict[str, list[dict[str, str]]] = {}
    for name, args in WORKLOADS.items():
        rows[name] = []
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory() as tmp:
                rows[name].append(one(args, Path(tmp), a.stress))
    text = section(rows, "PYTHONPATH=. python benchmarks/comm_verdict.py "
                   + " ".join(sys.argv[1:]), a.stress)
    print(text)
    if not a.no_write:
        prepend_section(text)


if __name__ == "__main__":
    main()
