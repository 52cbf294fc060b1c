"""Gradient clipping in the trials' step (core/training.py): a workload's ``max_grad_norm`` is
clipped on the true gradients, after GradScaler unscales them and before the optimizer steps,
whatever the optimizer's implementation. A fused optimizer unscales inside its own step, so a
clip in a pre-step hook read the scaled norm (65536 times the true one under fp16's first
scale) and trained with updates shrunk by about the loss scale."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import autotune
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.training import Training
from tests.conftest import scratch

#: Each input row's entries: the weight's true gradient is 0.25 x 4 rows x 0.75 = 0.75 per
#: entry, a norm of 1.5 over its 4 entries; scaled by 65536 it stays inside fp16's range.
ROW = 0.75
MAX_NORM = 1.0


class Clipped(autotune.Workload):
    """A linear map whose weight gradient is known, SGD at learning rate 1: the step moves the
    weight by exactly the clipped gradient."""

    name = "clipped"
    max_grad_norm = MAX_NORM

    def __init__(self) -> None:
        self.defaults = {"batch_size": 4, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> TensorDataset:
        return TensorDataset(torch.full((8, 4), ROW), torch.zeros(8))

    def model(self) -> nn.Module:
        return nn.Linear(4, 1, bias=False)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return outputs.float().sum() * 0.25

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=1.0, **impl)


def _update_norm(knobs: dict[str, Any], grad_accum: int = 1) -> float:
    """The norm of the weight's move over one optimizer step."""
    run = Training(Clipped(), knobs, "cpu", grad_accum=grad_accum)
    before = run.model.weight.detach().clone()
    batch = run.to_device(*run.split(next(iter(run.loader))))
    for _ in range(grad_accum):
        run.step(*batch)
    return float((run.model.weight.detach() - before).norm())


@pytest.mark.parametrize("impl", ["fused", "foreach", "default"])
def test_fp16_clips_the_true_norm_whatever_the_optimizer(impl: str, cpu_env: Env) -> None:
    """Under fp16's GradScaler (the CPU's, the same code as CUDA's), a true gradient norm of
    1.5 is clipped to 1.0: the step moves the weight by 1.0, fused or not."""
    knobs = {**build_space(cpu_env, Clipped(), {}).baseline, "amp": "fp16",
             "optimizer_impl": impl}
    assert _update_norm(knobs) == pytest.approx(MAX_NORM, rel=1e-3)


def test_fp32_and_accumulation_clip_once_per_optimizer_step(cpu_env: Env) -> None:
    """Without a scaler the clip is the same; with accumulation it clips the cycle's summed
    gradient once, before the one optimizer step (each micro-batch's loss is divided by the
    cycle's length, so the summed gradient's norm is still 1.5)."""
    knobs = build_space(cpu_env, Clipped(), {}).baseline
    assert _update_norm(knobs) == pytest.approx(MAX_NORM, rel=1e-5)
    assert _update_norm(knobs, grad_accum=2) == pytest.approx(MAX_NORM, rel=1e-5)


def test_without_max_grad_norm_nothing_is_clipped(cpu_env: Env) -> None:
    """A workload that declares no clipping steps on its whole gradient (norm 1.5)."""
    knobs = {**build_space(cpu_env, Clipped(), {}).baseline, "amp": "fp16",
             "optimizer_impl": "fused"}
    Clipped.max_grad_norm = None
    try:
        assert _update_norm(knobs) == pytest.approx(1.5, rel=1e-3)
    finally:
        Clipped.max_grad_norm = MAX_NORM


def test_clipping_by_value_clips_each_element_after_the_unscale(cpu_env: Env) -> None:
    """``clip_grad_value`` (Lightning's gradient_clip_algorithm="value"): each of the four
    entries' true gradient 0.75 clipped to 0.5, under fp16's scaler too: a move of norm 1.0."""
    knobs = {**build_space(cpu_env, Clipped(), {}).baseline, "amp": "fp16",
             "optimizer_impl": "fused"}
    Clipped.max_grad_norm, Clipped.clip_grad_value = None, 0.5
    try:
        assert _update_norm(knobs) == pytest.approx(0.5 * 2, rel=1e-3)
    finally:
        Clipped.max_grad_norm, Clipped.clip_grad_value = MAX_NORM, None


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_a_lightning_trainers_clipping_is_the_trials(algorithm: str) -> None:
    """lightning.tune's trainer_kwargs gradient_clip_val reaches the trials' step: by norm,
    or by value as gradient_clip_algorithm says (the trials trained unclipped)."""
    pytest.importorskip("lightning")
    from autotune.adapters.lightning.workload import LightningObjectsWorkload
    from autotune.core.shipping import ToShip
    from examples.lightning_live_tune import Classifier, ImageData

    parts = {"module": Classifier(), "datamodule": ImageData(), "train_dataloaders": None,
             "trainer_kwargs": {"gradient_clip_val": 0.5, "gradient_clip_algorithm": algorithm},
             "module_name": "examples.lightning_live_tune.Classifier"}
    names = dict.fromkeys(parts, "part")
    spec = ToShip(parts, names, target="x", label="clip").spec(scratch())
    workload = LightningObjectsWorkload(objects=spec["objects"], name="clip")
    assert (workload.max_grad_norm, workload.clip_grad_value) == (
        (0.5, None) if algorithm == "norm" else (None, 0.5))
