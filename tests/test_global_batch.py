"""The user's global batch is the unit of training (autotune/core/global_batch.py): a
workload's own gradient accumulation (Hugging Face's gradient_accumulation_steps, Lightning's
accumulate_grad_batches, a plain Workload's defaults["grad_accum"]) or study.keep_global_batch
makes batch_size a micro-batch, accumulated to the baseline's global batch where it divides it;
"same training" is the same global batch; both answers carry grad_accum and global_batch, the
words state a change of the global batch and the learning-rate rule of the optimizer's
family."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
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
    dividing_batches,
    same_training_batch,
)
from autotune.core.knobs import KNOBS, KnobError
from autotune.core.space import build_space, keep_global_batch
from autotune.core.training import Training
from autotune.core.workload import WorkloadError
from autotune.search.loop.same_training import target as same_training_target
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_ARGS, run_cli, study_setup

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


# -- the frameworks: a Hugging Face Trainer, a Lightning Trainer, each accumulating 4 -------------

#: Micro-batches 4 (the user's: 4 x 4), 8 (8 x 2: the same global batch of 16) and 64 (64 x 1:
#: a global batch of its own). Everything else pinned: the seeded draws decide the trials.
FRAMEWORK_KNOBS = {"batch_size": [4, 8, 64], "num_workers": 0, "amp": "off", "cpu_threads": 1,
                   "optimizer_impl": "default", "host_allocator": "default"}


def _hf_trainer(out: Path, accumulation: int = 4) -> Any:
    from transformers import Trainer, TrainingArguments, default_data_collator

    from examples.hf_tune import tokens
    from tests.workloads_accum import sleepy_llama

    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=4,
                             gradient_accumulation_steps=accumulation, report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    return Trainer(model=sleepy_llama(), args=args, data_collator=default_data_collator,
                   train_dataset=tokens(n=512, seq_len=32, vocab_size=128))


def _both_answers(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """best.yaml and best-same-training.yaml, each checked to hold its own global batch."""
    best = yaml.safe_load((folder / "best.yaml").read_text())
    same = yaml.safe_load((folder / "best-same-training.yaml").read_text())
    # The fastest: micro-batch 64, a global batch of its own, said as such.
    assert best["knobs"]["batch_size"] == 64 and best["grad_accum"] == 1
    assert best["global_batch"] == 64
    assert best["training"]["this"]["changes"]["batch_size"] == (
        "global batch 16 -> 64 (micro-batch 4 -> 64, accumulation 4 -> 1): 4x fewer optimizer "
        "steps per epoch at the same learning rate")
    # The fastest that trains the same model: the user's global batch of 16, as 8 x 2.
    assert same["knobs"]["batch_size"] == 8 and same["grad_accum"] == 2
    assert same["global_batch"] == 16 and same["training"]["this"]["changes"] == {}
    return best, same


def _requests(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in folder.glob("trials/*/request.json")]


def test_an_hf_trainer_that_accumulates_keeps_its_global_batch(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """per_device_train_batch_size=4, gradient_accumulation_steps=4 (a global batch of 16),
    hf.tune: the baseline runs 4 x 4, both answers state their global batch (best-same-training
    16 as 8 x 2), the summary says what the fastest changes with the square-root rule of AdamW,
    the exported TrainingArguments carry the accumulation, apply sets it and train() runs."""
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")  # tests/workloads_accum.py imports both
    from autotune.adapters import hf

    trainer = _hf_trainer(tmp_path / "out")
    tuned = hf.tune(trainer, SEARCH_ONLY, device="cpu", n_trials=4, name="hfacc",
                    out_dir=tmp_path / "studies", knobs={**FRAMEWORK_KNOBS, "attention": "sdpa",
                                                         "activation_checkpointing": False})
    folder = tmp_path / "studies" / "hfacc"
    requests = _requests(folder)
    base = next(r for r in requests if r["knobs"]["batch_size"] == 4)
    assert base["grad_accum"] == 4  # the user's own accumulation, measured
    assert {(r["knobs"]["batch_size"], r["grad_accum"]) for r in requests} == {
        (4, 4), (8, 2), (64, 1)}, "the seeded draws no longer reach micro-batch 64"
    best, same = _both_answers(folder)
    line = next(s for s in caplog.messages if s.startswith("  training: "))
    assert "global batch 16 -> 64 (micro-batch 4 -> 64, accumulation 4 -> 1)" in line
    assert "x2 (the square-root rule for Adam-family optimizers, which this workload's AdamW" in line
    assert line.endswith("best-same-training.yaml")
    # The exports: TrainingArguments with the accumulation of each answer.
    assert tuned.training_args.per_device_train_batch_size == 64
    assert tuned.training_args.gradient_accumulation_steps == 1
    fields = yaml.safe_load((folder / "training_args-same-training.yaml").read_text())
    assert fields["per_device_train_batch_size"] == 8
    assert fields["gradient_accumulation_steps"] == 2
    # apply the same-training answer to the user's Trainer: 8 x 2, and it trains.
    user = _hf_trainer(tmp_path / "again")
    hf.apply(user, folder / "best-same-training.yaml")
    assert user.args.per_device_train_batch_size == 8 and user.args.gradient_accumulation_steps == 2
    user.args.max_steps = 2
    assert user.train().global_step == 2


def test_a_best_yaml_without_grad_accum_keeps_the_trainers_accumulation(tmp_path: Path) -> None:
    """A best.yaml written before grad_accum was carried, applied to a Trainer that accumulates:
    the Trainer's gradient_accumulation_steps stays, with one warning naming it; a Lightning
    Trainer's accumulate_grad_batches likewise (trainer_kwargs leave it out)."""
    pytest.importorskip("transformers")
    L = pytest.importorskip("lightning")
    from autotune.adapters import hf
    from autotune.adapters import lightning as at_lightning
    from autotune.adapters.hf.workload import training_arguments_kwargs
    from autotune.production.runtime import KnobOverridden
    from tests.workloads_accum import SleepyClassifier, SmallData

    knobs = {k.name: k.off for k in KNOBS} | {"batch_size": 8, "num_workers": 0,
                                               "host_allocator": "default", "cpu_threads": None}
    legacy = {"knobs": knobs, "device": {"type": "cpu"}}
    assert "gradient_accumulation_steps" not in training_arguments_kwargs(legacy)
    assert training_arguments_kwargs({**legacy, "grad_accum": 2})["gradient_accumulation_steps"] == 2
    trainer = _hf_trainer(tmp_path / "out")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.apply(trainer, legacy)
    said = [str(w.message) for w in caught if issubclass(w.category, KnobOverridden)]
    assert len(said) == 1 and "gradient_accumulation_steps=4 is kept" in said[0]
    # The file's micro-batch 8 with the kept 4 steps: 32, not the user's 4 x 4 = 16.
    assert "a global batch of 8 x 4 = 32 per rank where yours was 4 x 4 = 16" in said[0]
    assert "stays as it is" not in said[0]
    assert trainer.args.gradient_accumulation_steps == 4
    assert trainer.args.per_device_train_batch_size == 8
    with warnings.catch_warnings(record=True) as caught:  # the user's own micro-batch: kept
        warnings.simplefilter("always")
        hf.apply(_hf_trainer(tmp_path / "own"), {**legacy, "knobs": {**knobs, "batch_size": 4}})
    said = [str(w.message) for w in caught if issubclass(w.category, KnobOverridden)]
    assert len(said) == 1 and "so your global batch stays as it is" in said[0]
    # Lightning: the Trainer's own accumulation stays, said once when training starts.
    assert "accumulate_grad_batches" not in at_lightning.trainer_kwargs(legacy)
    assert at_lightning.trainer_kwargs({**legacy, "grad_accum": 2})["accumulate_grad_batches"] == 2
    module = at_lightning.prepare_module(SleepyClassifier(sleep_ms=0), legacy)
    fit = L.Trainer(**at_lightning.trainer_kwargs(legacy), accumulate_grad_batches=4, max_steps=1,
                    accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, at_lightning.prepare_datamodule(SmallData(), legacy))
    said = [str(w.message) for w in caught if issubclass(w.category, KnobOverridden)]
    assert len(said) == 1 and "accumulate_grad_batches=4 is kept" in said[0]
    assert "a global batch of 8 x 4 = 32 per rank" in said[0]
    assert fit.accumulate_grad_batches == 4


def test_a_lightning_trainer_that_accumulates_keeps_its_global_batch(tmp_path: Path) -> None:
    """accumulate_grad_batches=4 on a DataModule of batch 4, at_lightning.tune: the baseline
    runs 4 x 4, both answers state their global batch, trainer_kwargs carry the accumulation."""
    L = pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    from autotune.adapters import lightning as at_lightning
    from tests.workloads_accum import SleepyClassifier, SmallData

    tuned = at_lightning.tune(SleepyClassifier(), datamodule=SmallData(batch_size=4),
                              trainer_kwargs={"accumulate_grad_batches": 4},
                              overrides=SEARCH_ONLY, device="cpu", n_trials=4, name="litacc",
                              out_dir=tmp_path / "studies", knobs=FRAMEWORK_KNOBS)
    folder = tmp_path / "studies" / "litacc"
    requests = _requests(folder)
    base = next(r for r in requests if r["knobs"]["batch_size"] == 4)
    assert base["grad_accum"] == 4
    assert {(r["knobs"]["batch_size"], r["grad_accum"]) for r in requests} == {
        (4, 4), (8, 2), (64, 1)}, "the seeded draws no longer reach micro-batch 64"
    best, same = _both_answers(folder)
    assert "x2 (the square-root rule" in best["training"]["words"]
    assert tuned.trainer_kwargs["accumulate_grad_batches"] == 1
    same_kwargs = at_lightning.trainer_kwargs(folder / "best-same-training.yaml")
    assert same_kwargs["accumulate_grad_batches"] == 2
    lightning_yaml = yaml.safe_load((folder / "lightning-same-training.yaml").read_text())
    assert lightning_yaml["trainer"]["accumulate_grad_batches"] == 2
    assert lightning_yaml["dataloader"]["batch_size"] == 8
    trainer = L.Trainer(**same_kwargs, max_steps=2, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    path = folder / "best-same-training.yaml"
    trainer.fit(at_lightning.prepare_module(SleepyClassifier(sleep_ms=0), path),
                at_lightning.prepare_datamodule(SmallData(batch_size=4), path))
    assert trainer.global_step == 2 and trainer.accumulate_grad_batches == 2


def test_ranks_count_in_the_global_batch(tmp_path: Path) -> None:
    """Two ranks (gloo), each 8 x 2: the global batch is 32, every rank's samples per optimizer
    step; the header says so, each trial's micro-batch that divides 16 accumulates to it per
    rank, and best.yaml's global_batch counts both ranks."""
    proc = run_cli(["workload=mlp", "+workload.batch_size=8", "+workload.grad_accum=2",
                    "device=cpu", "launch.nproc_per_node=2", "knobs.batch_size=[8,16]",
                    "study.n_trials=2", "study.name=ranks", *SEARCH_ONLY], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "global batch: 16 per rank, 32 over 2 ranks (your micro-batch 8 x 2" in proc.stdout
    folder = tmp_path / "studies" / "ranks"
    requests = _requests(folder)
    assert {r["knobs"]["batch_size"] * r["grad_accum"] for r in requests} == {16}
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["global_batch"] == 32 == best["knobs"]["batch_size"] * best["grad_accum"] * 2


def _cuda(env: Env) -> Env:
    return replace(env, device="cuda", cuda_capability=(9, 0), gpu_count=1)


def test_the_batch_domain_holds_the_micro_batches_that_keep_the_global_batch(cpu_env: Env) -> None:
    """6 x 4 (a global batch of 24) tries micro-batches 12 and 24, which keep it, beside the
    powers of two (16 is a global batch of its own); 4 x 3 tries 6 and 12. A workload that does
    not accumulate keeps the powers of two and its own batch."""
    for env in (cpu_env, _cuda(cpu_env)):
        values = build_space(env, MLPWorkload(batch_size=6, grad_accum=4), {}).domains[
            "batch_size"].values
        assert {3, 12, 24} <= set(values) and {1, 2, 4, 6, 8, 16} <= set(values)
        assert {6, 12} <= set(build_space(env, MLPWorkload(batch_size=4, grad_accum=3), {})
                              .domains["batch_size"].values)
    assert build_space(cpu_env, MLPWorkload(batch_size=6), {}).domains["batch_size"].values == \
        [1, 2, 4, 6, 8, 16]
    assert dividing_batches(24, [1, 2, 4, 8, 16]) == {1, 2, 3, 4, 6, 8, 12, 24}
    assert dividing_batches(720, [16, 32, 64], least=4) == {16, 30, 60, 90, 180, 360, 720}


def test_cuda_graphs_is_never_tried_where_a_trial_accumulates(cpu_env: Env) -> None:
    """A captured step is a whole optimizer step: where the micro-batch accumulates, the
    space offers cuda_graphs=False alone (no trial is spent failing to capture); where it steps
    on its own (the global batch itself, or a global batch of its own) both are searched. The
    same under study.keep_global_batch, and in the same-training trial."""
    space = build_space(_cuda(cpu_env), MLPWorkload(batch_size=6, grad_accum=4), {})
    assert space.param("cuda_graphs", {"batch_size": 12}) == ("cuda_graphs without True", [False])
    assert space.param("cuda_graphs", {"batch_size": 24})[1] == [False, True]
    assert space.param("cuda_graphs", {"batch_size": 16})[1] == [False, True]
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(60):
        knobs = space.suggest(study.ask())
        assert not (knobs["cuda_graphs"] and accumulation(24, knobs["batch_size"]) > 1), knobs
    kept = keep_global_batch(build_space(_cuda(cpu_env), MLPWorkload(batch_size=48), {}), 48)
    assert kept.param("cuda_graphs", {"batch_size": 24})[1] == [False]
    assert kept.param("cuda_graphs", {"batch_size": 48})[1] == [False, True]
    # The same-training trial: the best captured its step at 16, a global batch of its own;
    # at the user's global batch its micro-batch 12 accumulates, so it runs uncaptured.
    setup = replace(study_setup(_cuda(cpu_env), space), global_batch=24)
    search = optuna.create_study(direction="maximize")
    for value, source, knobs in ((100.0, "baseline", space.baseline),
                                 (300.0, "search", {**space.baseline, "batch_size": 16,
                                                    "cuda_graphs": True})):
        search.add_trial(optuna.trial.create_trial(
            value=value, user_attrs={"source": source, "outcome": "ok", "knobs": knobs}))
    search.set_user_attr("global_batch", 24)
    same = same_training_target(setup, search)
    assert same is not None and same["batch_size"] == 12 and same["cuda_graphs"] is False
