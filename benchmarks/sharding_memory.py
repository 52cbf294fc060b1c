"""What a rank's peak memory means on the CPU, where glibc decides whether freed memory goes
back to the OS: 2 gloo ranks under torchrun (one core each), the ~67M-parameter Llama of
examples/fsdp_train.py with AdamW, each rank built and stepped by the trials' own code
(``Training``: ``distributed.wrap`` shards or replicates, ``apply_process_knobs`` sets the
allocator), for each sharding (DDP, full_shard, shard_grad_op) under each ``host_allocator``
(default; retain; release: a 64 KiB mmap threshold, the heap trimmed at once). Each rank reads
its memory as a trial does (``readings.peak_rss_bytes``: its proportional resident set plus
how far its high-water mark rose above it, and its loader workers'), and its proportional
resident set after the last step.

    PYTHONPATH=. python benchmarks/sharding_memory.py [--steps 6] [--write]

``--write`` prepends the table to docs/benchmarks.md (machine, date, command).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHARDINGS = ("no_shard", "full_shard", "shard_grad_op")
ALLOCATORS = ("default", "retain", "release")


def rank_side(sharding: str, allocator: str, steps: int, out: str) -> None:
    """One rank: the trial's own pinning, process knobs, wrapper and step."""
    import torch.distributed as dist

    from autotune.cli.app import ranked
    from autotune.cli.config import LaunchConfig
    from autotune.core.distributed import pin_rank
    from autotune.core.env import probe
    from autotune.core.knobs import build_space
    from autotune.core.training import Training
    from autotune.measure.readings import _proc_field, peak_rss_bytes
    from examples.fsdp_train import LlamaWorkload

    pin_rank(int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]))
    dist.init_process_group("gloo")
    wl = LlamaWorkload()
    env = ranked(probe("cpu"), LaunchConfig(nproc_per_node=2))
    knobs = {**build_space(env, wl, {}).baseline, "sharding": sharding,
             "host_allocator": allocator}
    run = Training(wl, knobs, "cpu", seed=0)
    batches = iter(run.loader)
    times = []
    for _ in range(steps):
        inputs, targets = run.split(next(batches))
        t0 = time.perf_counter()
        run.step(*run.to_device(inputs, targets))
        times.append(time.perf_counter() - t0)
    # Resident now as the peak counts it: proportional set size (shared pages split).
    resident = _proc_field(os.getpid(), "smaps_rollup", "Pss:")
    figures = {"peak_gb": peak_rss_bytes() / 2**30, "resident_gb": resident / 2**30,
               "step_s": statistics.median(times[2:]),
               "params_m": sum(p.numel() for p in run.model.parameters()) / 1e6}  # DTensor: global
    Path(f"{out}.rank{dist.get_rank()}.json").write_text(json.dumps(figures))
    dist.barrier()
    dist.destroy_process_group()


def measure(steps: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for allocator in ALLOCATORS:
            for sharding in SHARDINGS:
                out = f"{tmp}/{sharding}-{allocator}"
                proc = subprocess.run(
                    [sys.executable, "-m", "torch.distributed.run", "--standalone",
                     "--nproc_per_node=2", __file__, "--rank-side", sharding, allocator,
                     str(steps), out], capture_output=True, text=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"})
                if proc.returncode != 0:
                    raise SystemExit(proc.stderr[-3000:])
                ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in (0, 1)]
                rows.append({"sharding": sharding, "allocator": allocator, "ranks": ranks})
                print(sharding, allocator, ranks, flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| host_allocator | sharding | peak per rank (GB, rank 0 / 1) | resident after "
             "the last step (GB, Pss) | median step (s), the slower rank |", "|---|---|---|---|---|"]
    for r in rows:
        a, b = r["ranks"]
        lines.append(f"| {r['allocator']} | {r['sharding']} | {a['peak_gb']:.2f} / "
                     f"{b['peak_gb']:.2f} | {a['resident_gb']:.2f} / {b['resident_gb']:.2f} | "
                     f"{max(a['step_s'], b['step_s']):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--rank-side", nargs=4, metavar=("SHARDING", "ALLOCATOR", "STEPS", "OUT"))
    args = parser.parse_args()
    if args.rank_side:
        sharding, allocator, steps, out = args.rank_side
        rank_side(sharding, allocator, int(steps), out)
        return
    rows = measure(args.steps)
    text = table(rows)
    print(text)
    if args.write:
        from benchmarks.history import prepend_section

        load = os.getloadavg()[0]
        when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        params = rows[0]["ranks"][0]["params_m"]
        import torch

        from autotune.core.env import cpu_model

        prepend_section(
            f"## A rank's peak memory on the CPU, by sharding and host allocator ({when}, "
            f"{cpu_model() or platform.machine()}, {os.cpu_count()} CPUs, torch "
            f"{torch.__version__}, load average {load:.1f} at the end)\n\n"
            f"    PYTHONPATH=. python benchmarks/sharding_memory.py --steps {args.steps} --write\n\n"
            f"2 gloo ranks under torchrun, one core each; the {params:.0f}M-parameter Llama of "
            "examples/fsdp_train.py (batch 4 x 128 tokens, AdamW), built and stepped by the "
            "trials' own code; the peak as a trial reads it.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
