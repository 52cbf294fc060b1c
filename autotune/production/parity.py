"""One side of ``autotune verify``'s A/B rounds: the production path run in a process of its own
with one configuration (the user's original settings, or the exported ones), timed per step.

``autotune verify`` (autotune/production/verify.py) starts ``python -m <verifier> --spec ...
--config <side>.yaml --side baseline|exported --steps N --warmup W --device D --out r.json``
for each side of each round; the verifier is the workload's (``Workload.verifier``). This
module is the default one: the runtime API (``autotune.Runtime``, the code a plain PyTorch
loop uses) around the workload's own dataset, model, optimizer and loss, with the meter. The
adapters' verifiers run the user's real Trainer (autotune/adapters/hf/verify.py,
adapters/lightning/verify.py) and share ``StepClock`` and ``side_args`` from here.

A process per side, not both in one: the host allocator, the CPU threads and TF32 are
process-wide and one-way, so a baseline run after an exported one in the same process would
run with the exported settings.

A side's process ends without the interpreter's teardown (core/quick_exit.py), once its
figures are written. Under torchrun on gloo a rank's teardown can race gloo's worker threads,
which still need the GIL to drop a finished collective (pytorch/pytorch#179291): the rank
aborts ("terminate called without an active exception", SIGABRT) after a complete run, and
verify loses the side. On this project's 2-vCPU VM (torch 2.14.1, 2026-11-27) a launched
Hugging Face study's verify lost a side so in 1 of 12 runs, with ``_close_group``'s barrier in
place (none in 35 more); a plain two-rank gloo script aborted in 2 of 40 torchruns that ended
by the teardown, none of 40 that ended this way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autotune.core.quick_exit import quick_exit
from autotune.core.workload import Workload, build_optimizer, build_workload
from autotune.measure.contention import Snapshot, snapshot
from autotune.measure.contention import between as between_loads


@dataclass
class StepClock:
    """Per-step host times of a training loop, warm-up excluded: when each step began (after
    its batch arrived) and ended. The device is synchronized at the measured span's two ends
    (CUDA), so the rate is the device's; in between the host runs as the loop lets it."""

    warmup: int
    device: torch.device
    begins: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    #: Each step's real tokens (a workload with tokens: core/tokens.py), None where not counted.
    tokens: list[int | None] = field(default_factory=list)
    #: The machine's load at the measured span's two ends (measure/contention.py): a side
    #: that ran beside another job is named, and autotune verify leaves its round out.
    loads: list[Snapshot] = field(default_factory=list)

    def begin(self) -> None:
        if not self.warmup and not self.begins:
            self.loads.append(snapshot())
        self.begins.append(time.perf_counter())

    def end(self, samples: int, tokens: int | None = None) -> None:
        if len(self.ends) == self.warmup - 1:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the measured span starts on the device's time
            self.loads.append(snapshot())  # read before the span's first time is taken
        self.ends.append(time.perf_counter())
        self.samples.append(int(samples))
        self.tokens.append(tokens)

    def finish(self) -> None:
        """Synchronize after the last step, so the last end is the device's."""
        if self.device.type == "cuda" and self.ends:
            torch.cuda.synchronize(self.device)
            self.ends[-1] = time.perf_counter()
        if self.loads:
            self.loads.append(snapshot())

    def result(self) -> dict[str, Any]:
        """samples/sec from the end of the last warm-up step to the end of the last step; the
        median time inside a step and between steps (the next batch, the loop's own hooks)."""
        w = self.warmup
        n = len(self.ends) - w
        if n < 2:
            raise RuntimeError(f"only {len(self.ends)} steps ran ({w} warm-up): too few to time")
        span = self.ends[-1] - self.ends[w - 1] if w > 0 else self.ends[-1] - self.begins[0]
        inside = [e - b for b, e in zip(self.begins[w:], self.ends[w:], strict=False)]
        between = [b - e for e, b in zip(self.ends[w - 1:-1] if w else self.ends[:-1],
                                          self.begins[w:] if w else self.begins[1:], strict=False)]
        counted = self.tokens[w:]
        tokens = ({"tokens_per_sec": sum(t or 0 for t in counted) / span}
                  if counted and all(t is not None for t in counted) else {})
        load = {"contention": between_loads(self.loads[0], self.loads[-1])} \
            if len(self.loads) >= 2 else {}
        return {"samples_per_sec": sum(self.samples[w:]) / span, "steps": n, **tokens,
                "step_ms": 1e3 * span / n, "inside_ms": 1e3 * statistics.median(inside),
                "between_ms": 1e3 * statistics.median(between) if between else 0.0, **load}


def side_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments every verifier takes (autotune/production/verify.py passes them)."""
    ap = argparse.ArgumentParser(description="one side of autotune verify's rounds")
    ap.add_argument("--spec", required=True, help="the study's workload spec (JSON file)")
    ap.add_argument("--config", required=True, help="this side's best.yaml")
    ap.add_argument("--side", choices=("baseline", "exported"), required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cpu-sized", action="store_true")
    ap.add_argument("--out", required=True)
    return ap.parse_args(argv)


def load_workload(args: argparse.Namespace) -> Workload:
    workload = build_workload(json.loads(Path(args.spec).read_text()))
    return workload.cpu_sized() if args.cpu_sized else workload


def write(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """This side's figures. Under torchrun (a Trainer verified as the study's ranks) every
    rank timed its own steps: the run's rates are the ranks' summed (they step in lockstep,
    so over one span), and rank 0 writes them."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        figures = {**figures, **_summed_over_ranks(figures, world), "ranks": world}
        _close_group()
        if int(os.environ.get("RANK", "0")) != 0:
            return
    Path(args.out).write_text(json.dumps({"side": args.side, **figures}))


def _close_group() -> None:
    """Every rank meets, then closes the group the framework left open: a rank that exited
    while its peer's gloo threads still held their connection aborted the peer, seen in a
    launched Lightning verify. The meeting made the abort rarer, not impossible (the module's
    docstring: the side's process also ends without the interpreter's teardown)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _summed_over_ranks(figures: dict[str, Any], world: int) -> dict[str, Any]:
    import torch.distributed as dist

    keys = [k for k in ("samples_per_sec", "tokens_per_sec") if k in figures]
    if not (dist.is_available() and dist.is_initialized()):  # the framework tore it down
        return {**{k: figures[k] * world for k in keys},
                "over_ranks": f"rank 0's rates x {world} ranks"}
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"  # NCCL reduces device tensors
    rates = torch.tensor([float(figures[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(rates)
    return {**dict(zip(keys, rates.tolist(), strict=True)), "over_ranks": "summed"}


def main(argv: Sequence[str] | None = None) -> None:
    """The runtime API's loop: ``Runtime`` from this side's best.yaml around the workload's
    own objects, as examples/train_plain.py and a user's plain loop use it."""
    from autotune.production.runtime import Runtime

    args = side_args(argv)
    workload = load_workload(args)
    rt = Runtime(args.config, device=args.device)
    stages = workload.stages()
    if stages:
        loader = rt.dataloader(workload.raw_dataset(), stages=stages, shuffle=True)
    else:
        loader = rt.dataloader(workload.dataset(rt.knobs["transfer_dtype"]), shuffle=True,
                               collate_fn=workload.collate_fn())
    model = rt.model(workload.model())
    opt = build_optimizer(workload, model, **rt.optimizer_kwargs())
    run = rt.wrap(model, opt, workload.loss, loader=loader,
                  device_transform=workload.device_transform, split_batch=workload.split_batch,
                  max_grad_norm=workload.max_grad_norm)
    clock = StepClock(args.warmup, rt.device)
    batch = int(rt.knobs["batch_size"])
    while len(clock.ends) < args.warmup + args.steps:
        it = iter(loader)
        for item in it:
            clock.begin()
            run.step(*run.to_device(*run.split(item)))
            clock.end(batch)
            if len(clock.ends) >= args.warmup + args.steps:
                break
    clock.finish()
    write(args, clock.result())


if __name__ == "__main__":
    main(sys.argv[1:])
    quick_exit(0)  # without the teardown: the docstring's last paragraph
