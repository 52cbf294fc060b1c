"""Would warm processes make the confirmation's rounds cheaper? Fresh windows (the product's
path: a new process per window) against warm ones (one process per configuration, kept
across rounds), the same two configurations, blocks of each interleaved on one machine.

    python -m benchmarks.warm_rounds [--blocks 8] [--block 3] [--keep DIR] [--record]

Run from the repository's root, on an idle machine. The configurations are the README
study's (``autotune workload=resnet18``, CPU-sized on a machine without a GPU): the baseline
(your configuration) and the kind of finalist its studies export on this project's CPU VM
(batch 128, bf16 autocast, channels_last, one persistent loader worker prefetching 4,
glibc's allocator retaining its blocks). Each block runs ``--block`` rounds of the two with
fresh windows, then ``--block`` rounds with warm processes (one per configuration, started for
the block and ended after it), then the next block: both designs see the same minutes of the
machine. In every round the two run one after the other in a random order, as the
confirmation's rounds do.

A warm window is what a fresh one measures after its build: the warm-up (its three steps,
then the batches the loader prefetched) and the measured loop (measure/window.py's
``warm_up`` and ``measured_loop``), in the process that ran the block's earlier windows. After
each window the parent waits until that process tree's CPU use falls quiet (its loader worker
refilling its prefetch queue would otherwise run beside the other configuration's window),
and that wait is counted in the round's seconds.

What it prints, per design: the seconds a round takes (both windows, a warm block's start-up
shared over its rounds), the mean paired speedup (its 95% interval), the round-to-round SD of
the paired log ratio, and for the warm design its split into the SD within a process pair and
the offset each pair of processes carries (the between-block SD less what the within-block
noise explains: a one-way random-effects estimate). From these: the seconds of rounds that
bring a pair's 95% interval to +-5% (the selection's zone), for fresh windows and for warm
processes restarted every m rounds (the offset averages only over the restarts: the per-round
variance is within + m x offset). ``--record`` puts the tables at the top of
docs/benchmarks.md with the machine, the date and the command (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.record import command, publish

#: The finalist: what the README study's CPU runs exported (docs/benchmarks.md, the
#: confirmation sections of 2026-12-01/02: trial 8 of readme-new-1 and its kind).
WINNER = {"num_workers": 1, "prefetch_factor": 4, "persistent_workers": True,
          "batch_size": 128, "amp": "bf16", "channels_last": True, "host_allocator": "retain",
          "transform_split": 1}
SIDES = ("baseline", "winner")
READY = "@@"  # the child's lines for the parent start with this; the rest is the child's own
#: A process tree is quiet when it used less than this share of one core over QUIET_S.
QUIET_SHARE, QUIET_S, SETTLE_CAP_S = 0.05, 0.2, 5.0
ZONE = 0.05


def child(request_path: str) -> None:
    """A warm process: build the training once, then a window per line read on stdin."""
    import torch

    from autotune.core.training import Training
    from autotune.core.workload import build_workload
    from autotune.measure.batches import Batches
    from autotune.measure.clock import Clock
    from autotune.measure.contention import between, snapshot
    from autotune.measure.figures import summarize
    from autotune.measure.loop import measured_loop
    from autotune.measure.protocol import TrialRequest, WindowResult
    from autotune.measure.readings import Progress
    from autotune.measure.window import warm_up

    t0 = time.perf_counter()
    req = TrialRequest.read(Path(request_path))
    device = torch.device(req.device)
    workload = build_workload(req.workload)
    if req.cpu_sized:
        workload = workload.cpu_sized()
    run = Training(workload, req.knobs, device, seed=req.seed, grad_accum=req.grad_accum)
    batches, clock = Batches(run), Clock(device)
    size, workers = int(req.knobs["batch_size"]), int(req.knobs["num_workers"])
    print(READY + json.dumps({"build_s": time.perf_counter() - t0}), flush=True)
    for _ in sys.stdin:
        result, progress = WindowResult(), Progress(None)
        w0 = time.perf_counter()
        warm_up(run, batches, clock, req.window, progress, result)
        start = snapshot()
        loop = measured_loop(run, batches, clock, req.window, progress, size, start)
        load = between(start, snapshot())
        summarize(result, loop, clock, progress, size, workers)
        print(READY + json.dumps({"figure": result.samples_per_sec,
                                  "seconds": time.perf_counter() - w0,
                                  "contended": bool(load.get("contended"))}), flush=True)


class Warm:
    """One warm process of a configuration, driven line by line."""

    def __init__(self, request: Path):
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.warm_rounds", "--child",
                                      str(request)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.build_s = self._read()["build_s"]
        self.start_s = time.monotonic() - t0  # the interpreter, its imports and the build

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(READY):
                return json.loads(line[len(READY):])
        raise RuntimeError(f"the warm process ended (code {self.proc.wait()})")

    def window(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        t0 = time.monotonic()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        out = self._read()
        out["settle_s"] = settle(self.proc.pid)
        out["wall_s"] = time.monotonic() - t0
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def settle(pid: int) -> float:
    """Wait until the process tree is quiet (its loader worker done refilling); the seconds."""
    import psutil

    t0 = time.monotonic()

    def cpu() -> float:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    last = cpu()
    while time.monotonic() - t0 < SETTLE_CAP_S:
        time.sleep(QUIET_S)
        now = cpu()
        if now - last < QUIET_SHARE * QUIET_S:
            break
        last = now
    return time.monotonic() - t0


def fresh_round(setup: Any, knobs: dict[str, dict[str, Any]], out: Path,
                rng: random.Random) -> dict[str, dict[str, Any]]:
    """One round of fresh windows (runner.run_window, the confirmation's own request)."""
    from autotune.measure.runner import run_window
    from autotune.search.confirmation.rounds import request

    order = list(SIDES)
    rng.shuffle(order)
    got = {}
    for side in order:
        t0 = time.monotonic()
        res = run_window(request(setup, knobs[side]), out / f"{side}-{rng.random():.6f}")
        got[side] = {"figure": res.samples_per_sec if res.ok else None,
                     "wall_s": time.monotonic() - t0,
                     "contended": bool((res.contention or {}).get("contended"))}
    return got


def warm_block(requests: dict[str, Path], rounds: int,
               rng: random.Random) -> tuple[list[dict[str, dict[str, Any]]], float]:
    """``rounds`` rounds with one warm process per configuration; the rounds and the seconds
    the processes took to start."""
    procs: dict[str, Warm] = {}
    try:
        for side in SIDES:
            procs[side] = Warm(requests[side])
        start = sum(p.start_s for p in procs.values())
        out = []
        for _ in range(rounds):
            order = list(SIDES)
            rng.shuffle(order)
            out.append({side: procs[side].window() for side in order})
        return out, start
    finally:
        for p in procs.values():
            p.close()


def logs(rounds: list[dict[str, dict[str, Any]]]) -> list[float]:
    return [math.log(r["winner"]["figure"] / r["baseline"]["figure"]) for r in rounds
            if r["winner"]["figure"] and r["baseline"]["figure"]]


def _ci(rounds: list[dict[str, dict[str, Any]]]) -> str:
    """The winner's paired speedup over the baseline with its 95% interval, as the
    confirmation computes it (results/intervals.paired_speedup)."""
    from autotune.results.intervals import paired_speedup

    iv = paired_speedup([r["winner"]["figure"] for r in rounds],
                        [r["baseline"]["figure"] for r in rounds])
    return f"{iv.point:.3f}x ({iv.low:.3f}-{iv.high:.3f})"


def components(blocks: list[list[float]]) -> tuple[float, float]:
    """Within-block and offset variance of the log ratios (one-way random effects, method of
    moments; the offset's floored at 0)."""
    m = statistics.fmean(len(b) for b in blocks)
    within = statistics.fmean(statistics.variance(b) for b in blocks)
    between = statistics.variance([statistics.fmean(b) for b in blocks])
    return within, max(0.0, between - within / m)


def rounds_to(var: float) -> float:
    """Rounds that bring a pair's 95% interval of log ratios to +-ZONE at this per-round
    variance (normal approximation)."""
    return (1.96 ** 2) * var / math.log1p(ZONE) ** 2


def report(fresh: list[list[dict[str, Any]]], warm: list[list[dict[str, Any]]],
           starts: list[float], block: int) -> str:
    every_f = [r for b in fresh for r in b]
    every_w = [r for b in warm for r in b]
    lf, lw = logs(every_f), logs(every_w)
    round_f = statistics.fmean(r["baseline"]["wall_s"] + r["winner"]["wall_s"] for r in every_f)
    round_w = statistics.fmean(r["baseline"]["wall_s"] + r["winner"]["wall_s"] for r in every_w)
    start = statistics.fmean(starts)
    settle_s = statistics.fmean(r[s]["settle_s"] for r in every_w for s in SIDES)
    within_f, offset_f = components([logs(b) for b in fresh])
    within_w, offset_w = components([logs(b) for b in warm])
    busy = {name: sum(r[s]["contended"] for r in rows for s in SIDES)
            for name, rows in (("fresh", every_f), ("warm", every_w))}
    lines = [
        "| design | rounds | seconds a round | paired speedup, winner / baseline (95% CI) | "
        "SD of the log ratio | within a block | offset a block carries | contended windows |",
        "|---|---|---|---|---|---|---|---|",
        f"| fresh process per window (today) | {len(lf)} | {round_f:.1f} | {_ci(every_f)} | "
        f"{statistics.stdev(lf):.3f} | {math.sqrt(within_f):.3f} | {math.sqrt(offset_f):.3f} | "
        f"{busy['fresh']} of {2 * len(every_f)} |",
        f"| warm process per configuration | {len(lw)} | {round_w:.1f} (+{start:.1f} a block "
        f"to start both; {settle_s:.1f} s a window settling) | {_ci(every_w)} | "
        f"{statistics.stdev(lw):.3f} | {math.sqrt(within_w):.3f} | {math.sqrt(offset_w):.3f} | "
        f"{busy['warm']} of {2 * len(every_w)} |",
        "",
        "| design | per-round variance | rounds to +-5% (95%) | seconds of rounds to +-5% |",
        "|---|---|---|---|",
    ]
    var_f = statistics.variance(lf)
    n = rounds_to(var_f)
    lines.append(f"| fresh | {var_f:.4f} | {n:.0f} | {n * round_f:.0f} |")
    for m in (1, 2, 3, 6, 12):
        var = within_w + m * offset_w
        n = rounds_to(var)
        lines.append(f"| warm, restarted every {m} rounds | {var:.4f} | {n:.0f} | "
                     f"{n * (round_w + start / m):.0f} |")
    lines.append("")
    lines.append(f"Blocks of {block} rounds (fresh, then warm), interleaved; the offset's "
                 f"estimate rests on {len(warm)} blocks of each design.")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    from autotune.search.confirmation.rounds import request
    from benchmarks.confirmation import _setup

    out = args.keep or Path(tempfile.mkdtemp(prefix="warm-rounds-"))
    out.mkdir(parents=True, exist_ok=True)
    setup = _setup("resnet18", [], out / "setup")
    knobs = {"baseline": dict(setup.space.baseline),
             "winner": {**setup.space.baseline, **WINNER}}
    requests = {}
    for side in SIDES:
        requests[side] = out / f"{side}.json"
        requests[side].write_text(request(setup, knobs[side]).to_json())
    rng = random.Random(0)
    fresh, warm, starts = [], [], []
    t0 = time.monotonic()
    for b in range(args.blocks):
        fresh.append([fresh_round(setup, knobs, out / "fresh", rng) for _ in range(args.block)])
        rounds, start = warm_block(requests, args.block, rng)
        warm.append(rounds)
        starts.append(start)
        print(f"block {b + 1}/{args.blocks}: fresh {[round(x, 3) for x in logs(fresh[-1])]}, "
              f"warm {[round(x, 3) for x in logs(rounds)]} ({time.monotonic() - t0:.0f} s)",
              flush=True)
    (out / "rounds.json").write_text(json.dumps({"fresh": fresh, "warm": warm,
                                                 "starts": starts}, indent=1))
    text = report(fresh, warm, starts, args.block)
    import platform

    publish([f"## Warm processes for the confirmation's rounds: fresh windows against warm "
             f"ones ({datetime.date.today()})", "",
             f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
             f"device {setup.env.device}. Command: `{command('benchmarks.warm_rounds')}`. "
             "The README study's baseline against its typical CPU export ("
             + ", ".join(f"{k}={v}" for k, v in WINNER.items()) + ").", "", text],
            args.record)

if __name__ == "__main__":
    main()
