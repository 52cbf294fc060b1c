"""Does a hand-written loop that applies the knobs by ``Runtime``'s calls (examples/own_loop.py:
``rt.model``, ``rt.compile``, ``rt.optimizer_kwargs``, ``rt.to_device``, ``rt.autocast``,
``rt.grad_scaler``, ``rt.zero_grad``, its own clipping and scheduler) take the same time per
step as the trials' own step (``Training.step``, clipping in the optimizer's pre-step hook)?

Both run the same best.yaml's knobs on the same 16 batches held in memory (no loader: the
loader is the study's and the loop's alike), in one process, alternating which goes first,
``--rounds`` times ``--steps`` steps each; the median milliseconds per step of each are printed
and prepended to docs/benchmarks.md (unless ``--no-write``)::

    python -m benchmarks.own_loop_step studies/own-loop/best.yaml [--no-write]

Run from the repository's root.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from torch.nn.functional import cross_entropy

import autotune
from autotune.core.training import Training
from benchmarks.record import command, prepend_section
from examples.own_loop import FEATURES, LR, MAX_NORM, OwnLoopWorkload, network

LABELS = {"trial": "the trials' Training.step", "loop": "the loop's own lines (Runtime calls)"}


def trial_step(knobs: dict[str, Any], batches: list[Any], steps: int) -> float:
    run = Training(OwnLoopWorkload(), knobs, "cpu")
    t = time.perf_counter()
    for i in range(steps):
        run.step(*run.to_device(*batches[i % len(batches)]))
    return (time.perf_counter() - t) / steps


def loop_step(rt: autotune.Runtime, batches: list[Any], steps: int) -> float:
    model = rt.model(network())
    forward = rt.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, **rt.optimizer_kwargs())
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps + 1)
    scaler = rt.grad_scaler()
    t = time.perf_counter()
    for i in range(steps):
        inputs, targets = rt.to_device(*batches[i % len(batches)])
        with rt.autocast():
            loss = cross_entropy(forward(inputs), targets)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        scaler.step(opt)
        scaler.update()
        rt.zero_grad(opt)
        sched.step()
    return (time.perf_counter() - t) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("best")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    doc = yaml.safe_load(Path(a.best).read_text())
    doc["knobs"].update(num_workers=0, prefetch_factor=None, persistent_workers=False)
    rt = autotune.Runtime(doc, device="cpu")
    knobs = rt.knobs
    bs = int(knobs["batch_size"])
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(bs, FEATURES, generator=g), torch.randint(0, 10, (bs,), generator=g))
               for _ in range(16)]
    ms: dict[str, list[float]] = {"trial": [], "loop": []}
    for r in range(a.rounds):
        order = ["trial", "loop"] if r % 2 else ["loop", "trial"]
        for name in order:
            per = trial_step(knobs, batches, a.steps) if name == "trial" else \
                loop_step(rt, batches, a.steps)
            ms[name].append(1000 * per)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = ", ".join(f"{k}={knobs[k]}" for k in ("batch_size", "amp", "optimizer_impl",
                                                   "set_to_none", "compile", "cpu_threads"))
    text = "\n".join([
        f"## A loop of your own against the trials' step ({now}, {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__})", "",
        f"    {command('benchmarks.own_loop_step')}", "",
        f"examples/own_loop.py's model, knobs {shown}; {a.rounds} alternating rounds of "
        f"{a.steps} steps on 16 batches in memory; load average {load} when it ended.", "",
        "| step | median ms per step | rounds |", "|---|---|---|",
        *(f"| {LABELS[k]} | {statistics.median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)} |"
          for k, v in ms.items()), ""])
    print(text)
    if not a.no_write:
        prepend_section(text)


if __name__ == "__main__":
    main()
