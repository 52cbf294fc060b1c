"""What a study costs besides its trials: the `autotune` command's time to its header, to its
first trial's start, and from its report to the end of its output (what a shell pipe, a CI log
or a test's ``subprocess.run`` waits for). A one-trial study of 2 ranks (``--nproc 1``: one
process) with a tiny window, so the fixed costs dominate, as they do in the test suite's
hundred-odd studies and in the GPU check's three commands.

    python -m benchmarks.cli_overhead [--runs 3] [--nproc 2] [--root <another checkout>]

Run from the repository's root.
``--root`` runs another checkout's code (e.g. ``git worktree add /tmp/before HEAD~1``) for a
side-by-side; the rows name the commit. Puts a section at the top of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.child_env import child_env
from benchmarks.record import command, prepend_section

ROOT = Path(__file__).resolve().parents[1]

ARGS = ["workload=mlp", "study.name=o", "study.n_trials=1", "study.confirm_runs=0",
        "device=cpu", "study.numerics_steps=0",
        "window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
        "window.min_measure_steps=2", "window.min_measure_seconds=1", "window.profile=false"]
MARKS = {"header": "autotune: study ", "trial 0 starts": "trial 0 (baseline):",
         "trial 0 ends": "trial 0: ", "report": "  report: "}
#: A window read beside another load (the hypervisor's steal included) is measured again after
#: a wait (search/contended.py): seconds that are the machine's, not the command's.
CONTENDED = "window contended"


def one(root: Path, nproc: int) -> dict[str, float]:
    """Seconds from the command's start to each mark, and to the end of its output."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", "from autotune.cli.main import main; main()", *ARGS,
             f"launch.nproc_per_node={nproc}"],
            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=child_env(root, COLUMNS="200"))
        seen: dict[str, float] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            if CONTENDED in line:  # measured again after a wait: its own column, not an end
                seen["re-measured"] = seen.get("re-measured", 0) + 1
                continue
            for name, start in MARKS.items():
                if name not in seen and line.startswith(start):
                    seen[name] = time.monotonic() - t0
        seen.setdefault("re-measured", 0)
        seen["output ends"] = time.monotonic() - t0
        if proc.wait() != 0:
            raise SystemExit(f"the study failed (exit {proc.returncode}) under {root}")
    return seen


def commit(root: Path) -> str:
    out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"],
                         capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "autotune"],
                           capture_output=True, text=True).stdout.strip()
    return (out.stdout.strip()[:60] or str(root)) + (" + uncommitted changes" if dirty else "")


def section(rows: dict[str, list[dict[str, float]]], command: str) -> str:
    import torch

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = [*MARKS, "output ends"]
    lines = [f"## What a study costs besides its trials ({now}, {platform.machine()}, "
             f"{os.cpu_count()} vCPUs, Python {platform.python_version()}, torch "
             f"{torch.__version__})", "", f"    {command}", "",
             "Median seconds from the command's start (runs in brackets):", "",
             "| code | " + " | ".join(names)
             + " | trial 0 | after the report | runs whose window was measured again |",
             "|---|" + "---|" * (len(names) + 3)]
    for code, runs in rows.items():
        med = {n: statistics.median(r[n] for r in runs) for n in names}
        cells = [f"{med[n]:.1f} ({', '.join(f'{r[n]:.1f}' for r in runs)})" for n in names]
        lines.append(f"| {code} | " + " | ".join(cells)
                     + f" | {med['trial 0 ends'] - med['trial 0 starts']:.1f} "
                     f"| {med['output ends'] - med['report']:.1f} "
                     f"| {sum(1 for r in runs if r['re-measured'])} of {len(runs)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--root", type=Path, action="append", default=[],
                    help="another checkout to measure beside this one (repeatable)")
    ap.add_argument("--nproc", type=int, default=2,
                    help="ranks of the study's one trial (1: one process, as most tests' studies)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    roots = [*a.root, ROOT]
    rows: dict[str, list[dict[str, float]]] = {commit(r): [] for r in roots}
    for _ in range(a.runs):  # interleaved: a slow minute touches every checkout alike
        for r in roots:
            rows[commit(r)].append(one(r, a.nproc))
    text = section(rows, command("benchmarks.cli_overhead"))
    print(text)
    if not a.no_write:
        prepend_section(text)


if __name__ == "__main__":
    main()
