"""What workers cost an in-memory dataset: the mlp workload's TensorDataset (4,096 x 64 floats)
at batch 32 and 128, with no workers and with 1 and 2 persistent ones (prefetch 8), each one
fresh trial window as the study runs it. Prints the window's speed, its loader wait, the
training process's own busy share of that wait (``loader_receive_share``), the workers' share
on a CPU, and the diagnosis's first fixes: where the workers are ahead and the training
process spends the wait receiving their batches, more workers are the wrong advice.

    python -m benchmarks.loader_receive [--rounds 2]

Run from the repository's root.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from autotune.diagnose.verdicts import diagnose
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.mlp import MLPWorkload
from tests.workloads_diag import baseline_knobs

MLP = {"_target_": "autotune.workloads.mlp.MLPWorkload"}
WINDOW = {"warmup_steps": 10, "measure_steps": 400, "measure_seconds": 4.0,
          "min_measure_steps": 20, "min_measure_seconds": 2.0, "timeout_s": 120.0,
          "stall_s": 60.0, "profile": False, "profile_steps": 2}


def one(workers: int, batch: int, tmp: Path) -> dict[str, Any]:
    knobs = {**baseline_knobs(MLPWorkload()), "num_workers": workers, "batch_size": batch,
             "persistent_workers": bool(workers), "prefetch_factor": 8 if workers else None}
    res = run_window(TrialRequest(workload=MLP, knobs=knobs, device="cpu", window=WINDOW), tmp)
    if res.outcome != "ok":
        return {"error": res.error}
    d = diagnose(dataclasses.asdict(res), knobs, "cpu", 16.0)
    ev = d["evidence"]
    return {"sps": res.samples_per_sec, "wait": ev["data_wait_share"],
            "receive": ev["loader_receive_share"], "workers_cpu": ev["loader_cpu_share"],
            "fixes": ", ".join(f"{x['knob']}={x['value']}" for x in d["fixes"][:2]),
            "bottleneck": d["bottleneck"]}


def share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


if __name__ == "__main__":  # the fork server re-imports this module in each trial
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print("| round | workers | batch | samples/s | loader wait | training process busy in it "
          "| workers on a CPU | verdict: first fixes |\n|---|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for batch in (32, 128):
            for workers in (0, 1, 2):
                with tempfile.TemporaryDirectory() as tmp:
                    o = one(workers, batch, Path(tmp))
                if "error" in o:
                    print(f"| {r + 1} | {workers} | {batch} | failed: {o['error']} |||||")
                    continue
                print(f"| {r + 1} | {workers} | {batch} | {o['sps']:,.0f} | {share(o['wait'])} | "
                      f"{share(o['receive'])} | {share(o['workers_cpu'])} | "
                      f"{o['bottleneck']}: {o['fixes']} |", flush=True)
