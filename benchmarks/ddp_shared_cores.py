"""The shared-cores case: four ways to set each rank's loader workers and threads,
side by side in a real ``torchrun --nproc_per_node=2`` of examples/ddp_train.py, whose samples
are read with latency, in randomized interleaved rounds with intervals.

    PYTHONPATH=. python benchmarks/ddp_shared_cores.py --rounds 5 --out /tmp/ddp_cores

1. ``single``: a study of one process that owned the machine, its export applied to every
   rank (what a user had before launch.nproc_per_node: each rank gets its workers and threads).
2. ``torchrun``: torchrun's own defaults, OMP_NUM_THREADS=1 and the script's own workers (0).
3. ``lightning``: Lightning's per-rank rule, max(1, cpus // local_world_size - 1) workers.
4. ``ddp``: the study with launch.nproc_per_node=2, its export as is (each rank pinned to its
   share, its workers and threads within it).

Prints a markdown table for docs/benchmarks.md: each side's median samples/s over the rounds
(all ranks), and the ddp export's paired speedup over each other side with its 95% interval.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.results.intervals import paired_speedup  # noqa: E402
from benchmarks.child_env import child_env  # noqa: E402

WORKLOAD = "workload._target_=examples.ddp_train.SlowReadsWorkload"


def study(out: Path, name: str, latency_ms: float, trials: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "autotune", WORKLOAD, f"+workload.latency_ms={latency_ms}",
           "device=cpu", f"study.name={name}", f"study.n_trials={trials}",
           f"study.out_dir={out}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env({}), cwd=ROOT)
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode not in (0, 4):
        raise SystemExit(f"study {name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return yaml.safe_load((out / name / "best.yaml").read_text())


def _env(extra: dict[str, str]) -> dict[str, str]:
    return child_env(**extra)


def sides(single: dict, ddp: dict, out: Path) -> dict[str, tuple[Path, dict[str, str]]]:
    """Each side's best.yaml and the environment torchrun starts its ranks with."""
    base = dict(ddp)
    base_knobs = yaml.safe_load((out / "ddp" / "trials" / "0" / "request.json").read_text())["knobs"]
    cpus = len(os.sched_getaffinity(0))
    configs = {
        "single": ({**{k: v for k, v in base.items() if k not in ("launch", "ddp_kwargs")},
                    "knobs": {**base_knobs, **{k: single["knobs"][k] for k in single["knobs"]
                                               if k in base_knobs and not k.startswith(
                                                   ("bucket", "gradient_as", "static", "broadcast"))}}},
                   {"OMP_NUM_THREADS": str(single["knobs"].get("cpu_threads") or 1)}),
        "torchrun": ({**{k: v for k, v in base.items() if k not in ("launch", "ddp_kwargs")},
                      "knobs": base_knobs}, {"OMP_NUM_THREADS": "1"}),
        "lightning": ({**{k: v for k, v in base.items() if k not in ("launch", "ddp_kwargs")},
                       "knobs": {**base_knobs, "num_workers": max(1, cpus // 2 - 1),
                                 "prefetch_factor": 2, "persistent_workers": False}},
                      {"OMP_NUM_THREADS": "1"}),
        "ddp": (ddp, dict(ddp["launch"]["environment"])),
    }
    paths = {}
    for name, (doc, env) in configs.items():
        path = out / f"side-{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        paths[name] = (path, env)
    return paths


def run_side(path: Path, env: dict[str, str], steps: int, latency_ms: float) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "examples" / "ddp_train.py"), str(path), "--steps", str(steps),
           "--latency-ms", str(latency_ms)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(env), cwd=ROOT,
                          timeout=600)
    found = re.search(r"([\d.]+) samples/s \(all ranks\)", proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"{path.name} failed: {proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ddp_cores"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    common = ["study.confirm_runs=0", "study.numerics_steps=0"]
    single = study(a.out, "single", a.latency_ms, a.trials, common)
    ddp = study(a.out, "ddp", a.latency_ms, a.trials, [*common, "launch.nproc_per_node=2"])
    paths = sides(single, ddp, a.out)
    runs: dict[str, list[float]] = {name: [] for name in paths}
    rng = random.Random(0)
    for i in range(a.rounds):
        order = list(paths)
        rng.shuffle(order)
        for name in order:
            runs[name].append(run_side(*paths[name], a.steps, a.latency_ms))
        print(f"round {i}: " + ", ".join(f"{n} {runs[n][-1]:.0f}" for n in paths), flush=True)
    print(f"\nsingle-process export: {_knobs(single)}; ddp export: {_knobs(ddp)}\n")
    print("| side | samples/s, median (rounds) | ddp export over it, 95% CI |")
    print("|---|---|---|")
    for name in paths:
        iv = paired_speedup(runs["ddp"], runs[name])
        rounds = ", ".join(f"{r:.0f}" for r in runs[name])
        print(f"| {name} | {statistics.median(runs[name]):,.1f} ({rounds}) | "
              + ("-" if name == "ddp" else iv.text()) + " |")


def _knobs(doc: dict) -> str:
    k = doc["knobs"]
    return ", ".join(f"{n}={k[n]}" for n in ("num_workers", "cpu_threads", "batch_size",
                                             "bucket_cap_mb", "gradient_as_bucket_view"))


if __name__ == "__main__":
    main()
