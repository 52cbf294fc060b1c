"""Your own PyTorch training loop (gradient clipping, a learning-rate scheduler, evaluation every
N steps, checkpoints) with a study's result applied by your own lines: each knob is one
``autotune.Runtime`` call that returns what the line needs (DataLoader arguments, the placed
model, optimizer arguments, an autocast context, a GradScaler, zero_grad).

    python examples/own_loop.py tune [OVERRIDE ...]                     # studies/own-loop/best.yaml
    python examples/own_loop.py train studies/own-loop/best.yaml        # your loop, tuned
    autotune verify studies/own-loop --script examples/own_loop.py train studies/own-loop/best.yaml

The documentation's "Your own loop" tutorial shows this file; the test suite runs it
(tests/test_own_loop.py). ``tune --quick``: windows of a few steps and two trials, for a
smoke test only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.functional import cross_entropy
from torch.utils.data import DataLoader, TensorDataset

import autotune

# --8<-- [start:model]
FEATURES, HIDDEN, CLASSES = 256, 1024, 10
LR, MAX_NORM = 1e-3, 1.0


def datasets(n: int = 8192, seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    """Train and validation sets: random features, labels from a fixed random linear map."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n + 1024, FEATURES, generator=g)
    y = (x @ torch.randn(FEATURES, CLASSES, generator=g)).argmax(1)
    return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])


def network() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
# --8<-- [end:model]


# --8<-- [start:workload]
class OwnLoopWorkload(autotune.Workload):
    """What the study measures: the same data, model, loss and optimizer as the loop below,
    its gradient clipping included (clipped after unscaling, before each optimizer step), at
    batch size 32."""

    name = "own-loop"
    max_grad_norm = MAX_NORM  # the loop's clip_grad_norm_

    def __init__(self, batch_size: int = 32):
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> TensorDataset:
        return datasets()[0]

    def model(self) -> nn.Module:
        return network()

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return cross_entropy(outputs, targets)

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=LR, **impl)
# --8<-- [end:workload]


def tune(quick: bool, more: list[str]) -> None:
    overrides = ["study.name=own-loop", *more]  # more: the command line's, e.g. knobs.amp=off
    if quick:  # a smoke test's windows: for a real study, leave these out
        overrides += ["study.n_trials=2", "window.warmup_steps=2", "window.measure_steps=6",
                      "window.measure_seconds=2", "window.min_measure_steps=2",
                      "window.min_measure_seconds=1", "window.profile=false",
                      "study.confirm_budget_s=0"]
    try:
        best = autotune.tune(overrides, workload=OwnLoopWorkload(), device="cpu")
    except autotune.CouldNotMeasure as exc:  # a busy machine: best.yaml keeps what is sure
        print(exc)
        best = exc.best
    print(best.document["speedup_text"], "-> studies/own-loop/best.yaml")


# --8<-- [start:loop]
def train(best: str, steps: int, eval_every: int, checkpoints: Path) -> None:
    rt = autotune.Runtime(best)  # threads, host allocator, TF32, cuDNN: process-wide, set now
    train_set, val_set = datasets()
    loader = DataLoader(train_set, shuffle=True, drop_last=True,
                        worker_init_fn=rt.worker_init_fn(), **rt.loader_kwargs())
    val_loader = DataLoader(val_set, batch_size=256)
    model = rt.model(network())  # on the device, memory format, train mode
    forward = rt.compile(model)  # torch.compile(model, mode=...) or the model itself
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, **rt.optimizer_kwargs())
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=steps)
    scaler = rt.grad_scaler()  # fp16: scales the loss; otherwise passes through
    meter = rt.meter()  # samples/s against the study's figure (autotune verify reads it)
    checkpoints.mkdir(parents=True, exist_ok=True)

    step, micro = 0, 0
    while step < steps:
        for inputs, targets in meter.wrap(loader):
            inputs, targets = rt.to_device(inputs, targets)  # non_blocking, channels_last
            with rt.autocast():  # the measured mixed precision
                loss = cross_entropy(forward(inputs), targets)
            scaler.scale(loss / rt.grad_accum).backward()
            meter.step(len(targets))
            micro += 1
            if micro % rt.grad_accum:  # study.keep_global_batch: gradients add up first
                continue
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            scaler.step(optimizer)
            scaler.update()
            rt.zero_grad(optimizer)  # set_to_none as measured
            scheduler.step()
            step += 1
            if step % eval_every == 0 or step == steps:
                print(f"step {step}: loss {loss.item():.3f}, validation accuracy "
                      f"{evaluate(rt, model, val_loader):.1%}")
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "step": step},
                           checkpoints / "last.pt")
            if step == steps:
                break


def evaluate(rt: autotune.Runtime, model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, targets in loader:
            inputs, targets = rt.to_device(inputs, targets)
            with rt.autocast():
                correct += int((model(inputs).argmax(1) == targets).sum())
            total += len(targets)
    model.train()
    return correct / total
# --8<-- [end:loop]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tune", help="run the study of this model")
    t.add_argument("--quick", action="store_true", help="tiny windows, 2 trials: a smoke test")
    t.add_argument("overrides", nargs="*", help="autotune overrides, e.g. knobs.cpu_threads=1")
    r = sub.add_parser("train", help="train with a study's best.yaml")
    r.add_argument("best", help="the study's best.yaml (autotune verify sets AUTOTUNE_BEST)")
    r.add_argument("--steps", type=int, default=600)
    r.add_argument("--eval-every", type=int, default=200)
    r.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    a = ap.parse_args()
    if a.command == "tune":
        tune(a.quick, a.overrides)
    else:
        train(a.best, a.steps, a.eval_every, a.checkpoints)


if __name__ == "__main__":
    main()
