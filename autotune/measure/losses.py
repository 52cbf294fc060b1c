"""CHILD side: a numerics request's first N losses (``autotune.search.checks.numerics`` compares them
with the reference run's)."""

from __future__ import annotations

import torch

from autotune.core.training import Training
from autotune.core.workload import build_workload
from autotune.measure.batches import Batches
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.readings import Progress


def record_losses(req: TrialRequest, result: WindowResult, progress: Progress) -> None:
    """The first N optimizer steps' losses from the request's seed, each the mean over its
    micro-batches (window.main runs this for a numerics request). Each step beats the
    runner's watchdog: a GPT study's fp32 reference at batch 64 (12 s a step on 2 cores) was
    silent past stall_s and ended as stalled, and its bf16 finalist exported unchecked
    (2026-12-06)."""
    workload = build_workload(req.workload)
    if req.cpu_sized:
        workload = workload.cpu_sized()
    run = Training(workload, req.knobs, torch.device(req.device), seed=req.seed,
                   grad_accum=req.grad_accum)
    batches = Batches(run)
    losses = []
    for _ in range(req.numerics_steps):
        total = 0.0
        for _ in range(run.grad_accum):
            total += float(run.step(*run.to_device(*next(batches))).float().item())
        losses.append(total / run.grad_accum)
        progress.beat("numerics", len(losses), force=True)
    result.losses = losses
    result.outcome = "ok"
