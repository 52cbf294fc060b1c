"""study.keep_global_batch: batch_size becomes the micro-batch, gradient accumulation keeps the
optimizer's batch at the baseline's, best.yaml carries both numbers."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch
import yaml

from autotune.core.env import Env
from autotune.core.knobs import KnobError
from autotune.core.space import build_space, keep_global_batch
from autotune.core.training import Training
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_ARGS, run_cli


def test_micro_batches_divide_the_global_batch(cpu_env: Env) -> None:
    wl = MLPWorkload(batch_size=48)
    space = keep_global_batch(build_space(cpu_env, wl, {}), 48)
    assert space.domains["batch_size"].values == [6, 12, 24, 48]
    assert space.baseline["batch_size"] == 48
    assert "global batch 48" in space.narrowed["batch_size"][1]
    with pytest.raises(KnobError, match="do not divide the global batch 48"):
        keep_global_batch(build_space(cpu_env, wl, {"batch_size": [16, 32]}), 48)


def test_accumulated_step_equals_the_full_batch_step(cpu_env: Env) -> None:
    """Four micro-batches of 8 with grad_accum=4 update the weights as one batch of 32 does
    (same seed, so the same shuffled samples), and the optimizer steps once per 32 samples."""
    wl = MLPWorkload(n_samples=256, batch_size=32)
    base = build_space(cpu_env, wl, {}).baseline
    full = Training(wl, base, "cpu")
    full.step(*full.to_device(*full.split(next(iter(full.loader)))))
    micro = Training(wl, {**base, "batch_size": 8}, "cpu", grad_accum=4)
    steps = [0]
    micro.optimizer.register_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))
    batches = iter(micro.loader)
    for _ in range(4):
        micro.step(*micro.to_device(*micro.split(next(batches))))
    assert steps[0] == 1
    for a, b in zip(full.model.parameters(), micro.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_every_trial_trains_with_the_baselines_global_batch(tmp_path: Path) -> None:
    log = tmp_path / "optimizer_steps.log"
    proc = run_cli(["workload._target_=tests.workloads_user.CountingMLP", f"+workload.log_file={log}",
                    "device=cpu", "study.keep_global_batch=true", "study.n_trials=4",
                    "study.agent=false", "study.prune=false", "study.confirm_runs=0",
                    "study.name=gb", *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [int(line) for line in log.read_text().split()]
    assert seen and set(seen) == {32}, seen  # samples per optimizer step, in every trial
    study = optuna.load_study(study_name="gb", storage=f"sqlite:///{tmp_path}/studies/gb/study.db")
    micro = {t.user_attrs["knobs"]["batch_size"] for t in study.get_trials()
             if t.user_attrs.get("outcome") == "ok"}
    assert 32 in micro and min(micro) < 32, micro  # accumulation was really exercised
    best = yaml.safe_load((tmp_path / "studies" / "gb" / "best.yaml").read_text())
    assert best["global_batch"] == 32
    assert best["grad_accum"] * best["knobs"]["batch_size"] == 32
