"""The user's global batch is the unit of training (autotune/core/global_batch.py): a
workload's own gradient accumulation (Hugging Face's gradient_accumulation_steps, Lightning's
accumulate_grad_batches, a plain Workload's defaults["grad_accum"]) or study.keep_global_batch
makes batch_size a micro-batch, accumulated to the baseline's global batch where it divides it;
"same training" is the same global batch; both answers carry grad_accum and global_batch, the
words state a change of the global batch and the learning-rate rule of the optimizer's
family."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml

from autotune.core.effects import (
    LINEAR_RULE,
    SQRT_RULE,
    learning_rate_words,
    optimizer_family,
    same_training_knobs,
    training_changes,
)
from autotune.core.env import Env
from autotune.core.global_batch import (
    accumulation,
    batches,
    declared_accumulation,
    same_training_batch,
)
from autotune.core.knobs import KNOBS, KnobError
from autotune.core.space import build_space, keep_global_batch
from autotune.core.training import Training
from autotune.core.workload import WorkloadError
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_ARGS, run_cli

#: A study's trials, the search alone: no confirmation rounds or numerics check, no agent (the
#: sampler's seeded draws decide the trials), each window measured once.
SEARCH_ONLY = [*TINY_ARGS, "study.confirm_runs=0", "study.numerics_steps=0", "study.agent=false",
               "study.remeasure_contended=0"]


def test_micro_batches_divide_the_global_batch(cpu_env: Env) -> None:
    wl = MLPWorkload(batch_size=48)
    space = keep_global_batch(build_space(cpu_env, wl, {}), 48)
    assert space.domains["batch_size"].values == [6, 12, 24, 48]
    assert space.baseline["batch_size"] == 48
    assert "global batch 48" in space.narrowed["batch_size"][1]
    with pytest.raises(KnobError, match="do not divide the global batch 48"):
        keep_global_batch(build_space(cpu_env, wl, {"batch_size": [16, 32]}), 48)
    # The user's own micro-batch stays in the domain and is the baseline: 1 x 64 steps.
    own = MLPWorkload(batch_size=1, grad_accum=64)
    space = keep_global_batch(build_space(cpu_env, own, {}), 64, 1)
    assert space.domains["batch_size"].values == [1, 8, 16, 32, 64]
    assert space.baseline["batch_size"] == 1


def test_a_micro_batch_accumulates_to_the_global_batch_where_it_divides_it() -> None:
    assert accumulation(16, 4) == 4 and accumulation(16, 16) == 1 and accumulation(16, 1) == 16
    assert accumulation(16, 64) == 1 and accumulation(16, 3) == 1  # a global batch of its own
    assert accumulation(None, 4) == 1  # a study that does not accumulate
    assert batches({"batch_size": 8}, 16) == (8, 2, 16)
    assert batches({"batch_size": 64}, 16, ranks=2) == (64, 1, 128)  # every rank's samples
    # The same-training micro-batch: the best's where it keeps the global batch, else the
    # largest of the domain below both that divides it.
    values = [1, 2, 4, 8, 16, 32, 64]
    assert same_training_batch(8, 16, values) == 8
    assert same_training_batch(64, 16, values) == 16
    assert same_training_batch(64, 16, [4, 8, 64]) == 8
    assert same_training_batch(24, 16, [4, 8, 24]) == 8


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True])
def test_a_declared_accumulation_that_is_not_a_count_is_refused(bad: Any) -> None:
    with pytest.raises(WorkloadError, match=r"defaults\['grad_accum'\]=.* whole number >= 1"):
        declared_accumulation(MLPWorkload(grad_accum=bad))
    assert declared_accumulation(MLPWorkload()) == 1 and declared_accumulation(
        MLPWorkload(grad_accum=4)) == 4


def test_the_words_speak_of_the_global_batch() -> None:
    """Another split of the user's global batch is the same training; a change of it is said
    as the global batch, with the micro-batch, the accumulation and the ranks that make it."""
    base = {k.name: k.off for k in KNOBS} | {"batch_size": 4, "num_workers": 0}
    steps = "4x fewer optimizer steps per epoch at the same learning rate"
    assert training_changes({**base, "batch_size": 16, "num_workers": 2}, base, 16) == {}
    assert training_changes({**base, "batch_size": 64}, base, 16) == {
        "batch_size": f"global batch 16 -> 64 (micro-batch 4 -> 64, accumulation 4 -> 1): {steps}"}
    assert training_changes({**base, "batch_size": 64}, base, 16, ranks=2) == {
        "batch_size": "global batch 32 -> 128 (micro-batch 4 -> 64 per rank, accumulation 4 -> 1, "
                      f"2 ranks): {steps}"}
    # No accumulation: one process says batch_size as before; ranks say the global batch.
    assert training_changes({**base, "batch_size": 16}, base) == {
        "batch_size": f"batch_size 4 -> 16: {steps}"}
    assert training_changes({**base, "batch_size": 16}, base, None, ranks=2) == {
        "batch_size": f"global batch 8 -> 32 (batch_size 4 -> 16 per rank, 2 ranks): {steps}"}
    # The same training at the global batch: the best's speed knobs, its micro-batch where it
    # keeps the global batch, else the domain's largest below both that does.
    best = {**base, "batch_size": 64, "num_workers": 2}
    same = same_training_knobs(best, base, 16, [1, 2, 4, 8, 16, 32, 64])
    assert same == {**best, "batch_size": 16}
    assert same_training_knobs(best, base, 16, [4, 8, 64])["batch_size"] == 8
    assert same_training_knobs(best, base)["batch_size"] == 4  # no accumulation: the user's


def test_the_learning_rate_rule_follows_the_optimizer_family() -> None:
    """SGD: the linear rule (Goyal et al. 2017); the Adam family: the square-root rule
    (Malladi et al. 2022); an optimizer of neither or not recorded: both, each with its family."""
    sgd = learning_rate_words(16, 64, "SGD")
    assert sgd == (f"scale the learning rate x4 (the linear rule for SGD, which this workload's "
                   f"SGD is, with warm-up: {LINEAR_RULE})")
    adam = learning_rate_words(16, 64, "AdamW")
    assert adam == ("scale the learning rate x2 (the square-root rule for Adam-family "
                    f"optimizers, which this workload's AdamW is: {SQRT_RULE})")
    assert "x0.5" in learning_rate_words(64, 16, "Adam")  # a smaller batch: the rule down
    for name in ("Adam", "AdamW8bit", "PagedAdamW8bit", "Adafactor", "RMSprop", "NAdam"):
        assert optimizer_family(name) == "adaptive", name
    assert optimizer_family("SGD") == "sgd" and optimizer_family(None) is None
    for name, why in ((None, "the study did not record the optimizer"),
                      ("Lion", "Lion is in neither family")):
        both = learning_rate_words(16, 64, name)
        assert "x4 by the linear rule if the optimizer is SGD" in both and LINEAR_RULE in both
        assert "x2 by the square-root rule if it is Adam-family" in both and SQRT_RULE in both
        assert both.endswith(why)


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


def test_a_workloads_own_accumulation_keeps_every_trials_global_batch(tmp_path: Path) -> None:
    """A plain Workload declaring ``grad_accum`` (8 x 4 = 32), no study.keep_global_batch: the
    baseline runs the user's accumulation, every micro-batch that divides 32 accumulates to it
    (the optimizer counts 32 samples per step in every trial), best.yaml carries both numbers."""
    log = tmp_path / "optimizer_steps.log"
    proc = run_cli(["workload._target_=tests.workloads_user.CountingMLP",
                    f"+workload.log_file={log}", "+workload.batch_size=8",
                    "+workload.grad_accum=4", "device=cpu", "knobs.batch_size=[2,8,32]",
                    "study.n_trials=4", "study.name=own", *SEARCH_ONLY], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(int(line) for line in log.read_text().split()) == {32}
    folder = tmp_path / "studies" / "own"
    requests = [json.loads(p.read_text()) for p in sorted(folder.glob("trials/*/request.json"))]
    assert requests[0]["knobs"]["batch_size"] == 8 and requests[0]["grad_accum"] == 4
    assert {r["knobs"]["batch_size"] * r["grad_accum"] for r in requests} == {32}
    assert len({r["knobs"]["batch_size"] for r in requests}) > 1  # accumulation exercised
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["global_batch"] == 32 == best["grad_accum"] * best["knobs"]["batch_size"]
    assert best["training"]["this"]["changes"] == {}  # every trial trains the same model
    assert not (folder / "best-same-training.yaml").exists()

