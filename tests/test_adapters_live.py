"""Tuning the user's live framework objects: a real ``transformers.Trainer`` (a BERT-style
classifier from its config, a tokenizer built locally, DataCollatorWithPadding over sentences
of varying length) through ``autotune.adapters.hf.tune``, and a real LightningModule that logs
with ``self.log`` and returns an optimizer with a per-step scheduler, with a DataModule that
augments each sample on the CPU, through ``autotune.adapters.lightning.tune``. What a user
relies on: the returned TrainingArguments / Trainer and DataLoader arguments carry the tuned
values, ``apply`` sets every knob on the real framework objects, they train, and an object
that cannot travel to a trial is named; then ``autotune verify`` runs their own Trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import autotune
from autotune.core.shipping import CannotTravel
from autotune.production.runtime import KnobOverridden
from tests.conftest import BARE_ARGS

L = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")

from autotune.adapters import hf  # noqa: E402
from autotune.adapters import lightning as at_lightning  # noqa: E402
from autotune.adapters.hf.workload import IMPL_OPTIM  # noqa: E402
from autotune.adapters.lightning.workload import AMP_PRECISION  # noqa: E402
from examples.hf_trainer_tune import Reviews, tokenizer, users_trainer  # noqa: E402
from examples.lightning_live_tune import Classifier, ImageData  # noqa: E402


def _small_trainer(tmp_path: Path) -> Any:
    trainer = users_trainer(str(tmp_path / "out"), "cpu")
    trainer.train_dataset = Reviews(tokenizer(), n=256)
    return trainer


def test_hf_tune_returns_tuned_arguments_that_apply_to_a_real_trainer_and_verify_runs_it(
        tmp_path: Path, caplog: Any) -> None:
    # batch 16 pinned: the exported side of verify trains another batch than the user's 8.
    # The search alone (BARE_ARGS): the tutorial runs this adapter's study with its
    # confirmation and numerics check (tests/test_docs_examples.py, hf_trainer.py).
    users = _small_trainer(tmp_path)
    try:
        tuned = hf.tune(users, [*BARE_ARGS], device="cpu", n_trials=2, name="hft",
                        out_dir=tmp_path / "studies", knobs={"batch_size": 16})
    except autotune.CouldNotMeasure as exc:  # a busy machine: the study says so, and its
        tuned = exc.tuned                    # export keeps what its intervals support
    best = tuned.best
    knobs = best.knobs
    assert knobs["batch_size"] == 16
    args = tuned.training_args
    assert isinstance(args, transformers.TrainingArguments)
    assert args.per_device_train_batch_size == knobs["batch_size"]
    assert args.dataloader_num_workers == knobs["num_workers"]
    assert args.bf16 == (knobs["amp"] == "bf16") and args.optim.value == IMPL_OPTIM[
        knobs["optimizer_impl"]]
    assert args.logging_steps == 10 and args.num_train_epochs == 1  # the user's own fields kept
    # Padding per batch: the shapes vary, measured on the user's collator, and said so.
    shapes = best.document["input_shapes"]
    assert shapes["vary"] and shapes["distinct"] > 1, shapes
    assert any("batch shapes vary" in m for m in caplog.messages)

    # apply sets every knob on a real Trainer, the accelerate state included, and it trains.
    trainer = _small_trainer(tmp_path)
    doc = {**best.document, "knobs": {**knobs, "amp": "bf16", "batch_size": 16,
                                            "num_workers": 1, "prefetch_factor": 2,
                                            "persistent_workers": False, "cpu_threads": 1,
                                            "host_allocator": "default"}}
    threads = torch.get_num_threads()
    try:
        hf.apply(trainer, doc)
        assert torch.get_num_threads() == 1  # this process's threads: the knob's
    finally:
        torch.set_num_threads(threads)
    assert trainer.args.per_device_train_batch_size == 16 and trainer._train_batch_size == 16
    assert trainer.accelerator.mixed_precision == "bf16"
    loader = trainer.get_train_dataloader()
    assert loader.num_workers == 1 and type(loader.worker_init_fn).__name__ == "WorkerThreads"
    trainer.args.max_steps = 2
    assert trainer.train().global_step == 2

    # autotune verify: the baseline side trains the Trainer as the user built it, the exported
    # side the same Trainer after hf.apply; their figures show the batch each trained with.
    result = autotune.verify(tmp_path / "studies" / "hft", rounds=1, steps=3, warmup=1)
    assert result.how == "Trainer.train"
    # (A round that ran beside other work is measured again: one more figure per side.)
    assert {f["batch_size"] for f in result.figures["baseline"]} == {8}  # the user's own
    assert {f["batch_size"] for f in result.figures["exported"]} == {16}  # hf.apply's
    assert result.realized.rounds >= 1 and result.realized.point > 0
    assert (tmp_path / "studies" / "hft" / "verify.json").exists()


def test_an_hf_object_that_cannot_travel_is_named(tmp_path: Path) -> None:
    trainer = _small_trainer(tmp_path)
    trainer.train_dataset.log = (tmp_path / "reads.log").open("w")  # an open file inside
    with pytest.raises(CannotTravel, match="the Trainer's train_dataset .*Reviews.*cannot be sent"):
        hf.tune(trainer, device="cpu", out_dir=tmp_path / "studies")


def test_lightning_tune_returns_arguments_and_applies_them_to_real_objects(tmp_path: Path
                                                                          ) -> None:
    try:
        tuned = at_lightning.tune(Classifier(), ImageData(read_ms=0.0),
                                  trainer_kwargs={"precision": "32-true"}, overrides=BARE_ARGS,
                                  device="cpu", n_trials=2, name="plt",
                                  out_dir=tmp_path / "studies",
                                  knobs={"optimizer_impl": "fused", "host_allocator": "default",
                                         "cpu_threads": torch.get_num_threads()})
    except autotune.CouldNotMeasure as exc:  # a busy machine (CI beside other work, 2026-11-27):
        tuned = exc.tuned                    # the result for what its intervals support
    knobs = tuned.best.knobs
    assert tuned.trainer_kwargs["precision"] == AMP_PRECISION[knobs["amp"]]
    assert tuned.dataloader_kwargs["batch_size"] == knobs["batch_size"]
    assert tuned.dataloader_kwargs["num_workers"] == knobs["num_workers"]
    assert knobs["optimizer_impl"] == "fused"

    assert tuned.module is not None and tuned.datamodule is not None  # yours, prepared
    module, data = tuned.apply(Classifier(), ImageData(read_ms=0.0))
    out = module.configure_optimizers()
    opt, sched = out["optimizer"], out["lr_scheduler"]["scheduler"]
    assert all(g["fused"] for g in opt.param_groups) and sched.optimizer is opt
    data.setup("fit")
    assert data.train_dataloader().batch_size == knobs["batch_size"]
    trainer = L.Trainer(**tuned.trainer_kwargs, max_steps=2, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, data)
    assert trainer.global_step == 2

    # A Trainer built without the measured arguments: one warning naming the line to add.
    odd = {**tuned.best.document, "knobs": {**knobs, "amp": "bf16"}}
    other = at_lightning.prepare_module(Classifier(), odd)
    with pytest.warns(KnobOverridden, match=r"precision='32-true' \(measured 'bf16-mixed'\).*"
                                            r"trainer_kwargs\(best\)"):
        L.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                  enable_progress_bar=False).fit(other, ImageData(read_ms=0.0))


def test_hf_apply_says_what_an_answer_changes_in_training(tmp_path: Path) -> None:
    """hf.apply of a batch the user did not train with warns once, with the learning-rate
    rule and the answer that keeps the training (production/best.warn_training_changes)."""
    import warnings

    from autotune.core.knobs import KNOBS
    from autotune.production.best import ChangesTraining
    from tests.test_lightning_apply import CHANGES

    knobs = {k.name: k.off for k in KNOBS}
    knobs.update(batch_size=16, num_workers=0, cpu_threads=None, host_allocator="default")
    trainer = _small_trainer(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.apply(trainer, {"knobs": knobs, "grad_accum": 1, "training": CHANGES})
    said = [str(w.message) for w in caught if issubclass(w.category, ChangesTraining)]
    assert len(said) == 1 and "batch_size 4 -> 16" in said[0], said
    assert trainer.args.per_device_train_batch_size == 16


def test_checkpointing_switched_on_on_the_model_is_the_baseline_and_off_is_tried(
        tmp_path: Path) -> None:
    """issue 70 item 1: a model whose checkpointing was switched on on the model itself (as
    PEFT's prepare_model_for_kbit_training does), its Trainer's arguments leaving it off: the
    baseline checkpoints as the user's run does (with their use_reentrant), and a trial of
    activation_checkpointing=False switches it off (core/sequences.py)."""
    from autotune.core import sequences
    from autotune.core.shipping import Shipped
    from autotune.core.workload import resolve_target

    trainer = _small_trainer(tmp_path)
    trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    assert not trainer.args.gradient_checkpointing
    spec = hf.trainer_parts(trainer).spec(tmp_path / "shipped")
    workload = resolve_target(spec["_target_"])(objects=spec["objects"], name=spec["name"])
    assert workload.defaults["activation_checkpointing"] is True
    assert workload.defaults["checkpoint_reentrant"] is True
    model = Shipped(spec["objects"])["model"]  # by value: it comes checkpointing
    assert sequences.model_checkpointing(model) == {"use_reentrant": True}
    sequences.prepare_model(model, {"activation_checkpointing": False})
    assert sequences.model_checkpointing(model) is None
