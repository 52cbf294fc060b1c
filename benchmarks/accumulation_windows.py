"""An accumulating fine-tune's trial window against a long run of the same configuration,
before and after windows of whole accumulation cycles (76290c7).

The Trainer: a GPT-2 of 4 layers of 256 built from its config (nothing is downloaded), AdamW (the Trainer's
default ``adamw_torch``), ``per_device_train_batch_size=4, gradient_accumulation_steps=8``:
a cycle of 8 micro-batches, longer than the CPU window's warm-up of 3. Each figure is the
baseline trial of a one-trial study through ``hf.tune`` (``study.n_trials=1``, no
confirmation, no numerics check), run in a fresh process against the checkout given:

- ``short``: the trial window as a study takes it (the device's default window);
- ``long``: the same configuration over ``--long-cycles`` whole cycles after two cycles of
  warm-up: the reference a window should read.

The window's bias is short / long - 1, its median over ``--repeats`` pairs (short and long
alternate, so a drift of the machine touches both).

    python -m benchmarks.accumulation_windows [--before REV] [--repeats 3] [--record]

``--before REV`` also runs the same at REV (a git worktree of it in a temporary folder,
this checkout's virtual environment): default 76290c7^, the code before item 4.
Run from the repository's root, on an idle machine.
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

import torch

from benchmarks.record import command, publish

ROOT = Path(__file__).resolve().parents[1]
MICRO, ACCUM = 4, 8
#: Run in the checkout under test: a one-trial study of the Trainer; prints its figure.
CHILD = r"""
import json, sys, tempfile
import torch, transformers
from pathlib import Path
from autotune.adapters import hf
from examples.hf_tune import tokens
import optuna

out = Path(tempfile.mkdtemp(prefix="accum-window-"))
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=2048, n_positions=128,
                              bos_token_id=0, eos_token_id=0)
model = transformers.GPT2LMHeadModel(cfg)
args = transformers.TrainingArguments(output_dir=str(out / "t"), per_device_train_batch_size=4,
                                      gradient_accumulation_steps=8, use_cpu=True,
                                      report_to="none")
trainer = transformers.Trainer(model=model, args=args,
                               train_dataset=tokens(n=2048, seq_len=128, vocab_size=2048),
                               data_collator=transformers.default_data_collator)
overrides = json.loads(sys.argv[1]) + [f"study.out_dir={out}/studies", "study.confirm_runs=0",
                                       "study.numerics_steps=0", "study.prune=false"]
hf.tune(trainer, overrides, device="cpu", n_trials=1, name="w")
t = optuna.load_study(study_name="w", storage=f"sqlite:///{out}/studies/w/study.db").trials[0]
print("FIGURE " + json.dumps({"value": t.value, "steps": t.user_attrs.get("steps"),
                              "outcome": t.user_attrs.get("outcome")}))
"""


def long_window(cycles: int) -> list[str]:
    return [f"window.warmup_steps={2 * ACCUM}", f"window.measure_steps={cycles * ACCUM}",
            f"window.min_measure_steps={cycles * ACCUM}", "window.measure_seconds=600",
            "window.min_measure_seconds=1", "window.timeout_s=900"]


def figure(checkout: Path, overrides: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(overrides)], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("FIGURE ")), None)
    if line is None:
        raise SystemExit(f"no figure from {checkout}: {done.stderr[-2000:]}")
    return json.loads(line.removeprefix("FIGURE "))


def measure(checkout: Path, repeats: int, cycles: int) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {"short": [], "long": [], "bias": []}
    for _ in range(repeats):
        short = figure(checkout, [])["value"]
        long = figure(checkout, long_window(cycles))["value"]
        runs["short"].append(short)
        runs["long"].append(long)
        runs["bias"].append(short / long - 1)
    return runs


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="accum-before-")) / "checkout"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True,
                   capture_output=True)
    return path


def row(label: str, runs: dict[str, list[float]]) -> str:
    def fig(xs: list[float]) -> str:
        return ", ".join(f"{x:,.1f}" for x in xs)
    return (f"| {label} | {fig(runs['short'])} | {fig(runs['long'])} | "
            f"{', '.join(f'{b:+.1%}' for b in runs['bias'])} | "
            f"{statistics.median(runs['bias']):+.1%} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="76290c7^")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--long-cycles", type=int, default=24)
    p.add_argument("--record", action="store_true")
    a = p.parse_args()
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True, check=True).stdout.strip()
    before = worktree(a.before)
    try:
        old = measure(before, a.repeats, a.long_cycles)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT,
                       capture_output=True)
    new = measure(ROOT, a.repeats, a.long_cycles)
    lines = [
        f"## An accumulating fine-tune's window against a long run, before and after whole "
        f"accumulation cycles ({started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, 2 cores, "
        f"torch {torch.__version__}; idle, nothing else ran. Command: "
        f"`{command('benchmarks.accumulation_windows')}` ({(time.monotonic() - t0) / 60:.0f} "
        f"min). A GPT-2 of 4 layers of 256 from its config, sequences of 128 tokens, AdamW, "
        f"micro-batch {MICRO} x accumulation {ACCUM}; each figure the baseline trial of a "
        f"one-trial `hf.tune` study in a fresh process. short: the CPU's default trial window; "
        f"long: {a.long_cycles} whole cycles after 2 cycles of warm-up.",
        "",
        "| code | short window, tokens/s | long run, tokens/s | bias (short / long - 1) | "
        "median bias |",
        "|---|---|---|---|---:|",
        row(f"before: {a.before}", old),
        row(f"after: {head}", new),
    ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
