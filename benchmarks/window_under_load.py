"""The trial window against a plain training loop, with the same knobs, quiet and beside a CPU hog.

Beside `stress-ng --cpu 1` on a 2-core VM a plain ResNet-18 64 px step (batch 32)
took 902 ms and autotune's window 3,576 ms for the same configuration. This measures both, each
in a fresh process, in turn (A B A B ...), so a user can see what the window itself adds:

    python benchmarks/window_under_load.py --rounds 3                  # quiet
    python benchmarks/window_under_load.py --rounds 3 --hog 1          # beside stress-ng --cpu 1
    python benchmarks/window_under_load.py --rounds 3 --hog 1 --record # and write docs/benchmarks.md

The plain loop is what a user's script does: ``autotune.Training`` with the knobs, a DataLoader
from it, ``step()`` per batch, one synchronizing ``.item()`` at the end. The window is
``autotune.measure.runner.run_window`` (the fork server, heartbeat, chunk edges, readings,
contention readings), the profiler capture and loader profile off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOAD = {"_target_": "autotune.workloads.resnet18.ResNet18Workload", "image_size": 64,
            "n_images": 2048, "batch_size": 32}
STEPS = 16

PLAIN = """
import json, statistics, sys, time, torch
from autotune.core.training import Training, build_loader
from autotune.core.workload import build_workload
knobs = json.loads(sys.argv[1]); steps = int(sys.argv[2])
wl = build_workload(json.loads(sys.argv[3]))
run = Training(wl, knobs, torch.device("cpu"), seed=0)
it = iter(build_loader(wl, knobs))
times = []
for i in range(3 + steps):
    t0 = time.perf_counter()
    x, y = next(it)
    loss = run.step(*run.to_device(x, y))
    loss.item()
    if i >= 3:
        times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"median_ms": statistics.median(times), "threads": torch.get_num_threads()}))
"""


def knobs_for(extra: dict[str, Any]) -> dict[str, Any]:
    from autotune.core.env import probe
    from autotune.core.knobs import build_space
    from autotune.core.workload import build_workload

    space = build_space(probe("cpu"), build_workload(WORKLOAD), {})
    return {**space.baseline, **extra}


def plain(knobs: dict[str, Any]) -> float:
    out = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(knobs), str(STEPS),
                          json.dumps(WORKLOAD)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_ms"])


def window(knobs: dict[str, Any], where: Path) -> tuple[float, dict[str, Any]]:
    from autotune.measure.protocol import TrialRequest
    from autotune.measure.runner import run_window

    win = {"warmup_steps": 3, "measure_steps": STEPS, "measure_seconds": 60.0,
           "min_measure_steps": STEPS, "min_measure_seconds": 0.0, "timeout_s": 600.0,
           "stall_s": 300.0, "compile_timeout_s": 600.0, "profile": False,
           "profile_steps": 2, "loader_profile": False}
    req = TrialRequest(workload=WORKLOAD, knobs=knobs, device="cpu", window=win)
    res = run_window(req, where)
    if not res.ok:
        raise RuntimeError(f"window {res.outcome}: {res.error}")
    return res.step_ms["median"], getattr(res, "contention", {})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hog", type=int, default=0, help="stress-ng --cpu N beside the runs")
    ap.add_argument("--hog-session", choices=("same", "own"), default="same",
                    help="the hog in this script's session (as a user's loop started beside it "
                         "from one shell) or in a session of its own (another user's job)")
    ap.add_argument("--knobs", default="{}", help="JSON knobs over the baseline's")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    knobs = knobs_for(json.loads(args.knobs))
    hog = subprocess.Popen(["stress-ng", "--cpu", str(args.hog), "--quiet"],
                           start_new_session=args.hog_session == "own") if args.hog else None
    rows: dict[str, list[float]] = {"plain": [], "window": []}
    contention: list[dict[str, Any]] = []
    try:
        time.sleep(1.0 if hog else 0.0)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                rows["plain"].append(plain(knobs))
                ms, cont = window(knobs, Path(tmp) / str(r))
                rows["window"].append(ms)
                contention.append(cont)
                print(f"round {r}: plain {rows['plain'][-1]:.1f} ms, window {ms:.1f} ms "
                      f"{json.dumps(cont)}", flush=True)
    finally:
        if hog:
            hog.terminate()
            hog.wait()
    med = {k: statistics.median(v) for k, v in rows.items()}
    load = f"stress-ng --cpu {args.hog} ({args.hog_session} session)" if args.hog else "quiet"
    line = (f"| {load} | "
            f"{json.dumps({k: v for k, v in knobs.items() if k in ('batch_size', 'num_workers', 'cpu_threads')})} | "
            f"{med['plain']:.0f} ({', '.join(f'{v:.0f}' for v in rows['plain'])}) | "
            f"{med['window']:.0f} ({', '.join(f'{v:.0f}' for v in rows['window'])}) | "
            f"{med['window'] / med['plain']:.2f} |")
    print(line)
    if args.record:
        doc = ROOT / "docs" / "benchmarks.md"
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with doc.open("a") as f:
            f.write(f"\n<!-- window_under_load {stamp} {os.cpu_count()} cores: "
                    f"python benchmarks/window_under_load.py --rounds {args.rounds} "
                    f"--hog {args.hog} --hog-session {args.hog_session} --knobs '{args.knobs}' -->\n{line}\n")


if __name__ == "__main__":
    main()
