"""The Trainer's own optimizer (``Trainer(optimizers=(SGD(...), None))``) is what the study
measures, advises for and keeps (adapters/hf/user_optim.py): the Trainer steps the instance it
was given and ignores ``TrainingArguments.optim``, which the study used to build instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.core.effects import learning_rate_words
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import WorkloadError, build_workload

transformers = pytest.importorskip("transformers")

from autotune.adapters import hf  # noqa: E402
from autotune.adapters.hf.workload import training_arguments_kwargs  # noqa: E402

TINY_GPT2 = {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 128, "n_positions": 16,
             "bos_token_id": 0, "eos_token_id": 0}


def _trainer(out: Path, optimizer: Any = None) -> Any:
    from examples.hf_tune import tokens

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY_GPT2))
    opt = optimizer(model) if optimizer else None
    args = transformers.TrainingArguments(output_dir=str(out), per_device_train_batch_size=4,
                                          use_cpu=True, report_to="none")
    return transformers.Trainer(model=model, args=args, optimizers=(opt, None),
                                train_dataset=tokens(n=32, seq_len=16, vocab_size=128),
                                data_collator=transformers.default_data_collator)


def _sgd(model: Any) -> torch.optim.SGD:
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    return torch.optim.SGD([{"params": decay, "weight_decay": 0.01}, {"params": rest}],
                           lr=0.05, momentum=0.9)


def test_the_trainers_sgd_is_measured_advised_for_and_kept(cpu_env: Env, tmp_path: Path) -> None:
    trainer = _trainer(tmp_path / "out", _sgd)
    wl = build_workload(hf.trainer_parts(trainer).spec(tmp_path / "shipped"))  # a trial's
    space = build_space(cpu_env, wl, {})
    assert space.baseline["optimizer"] is None  # not TrainingArguments.optim (adamw_torch)
    opt = Training(wl, space.baseline, "cpu").optimizer
    assert type(opt) is torch.optim.SGD
    assert [(g["lr"], g["momentum"], g["weight_decay"], len(g["params"])) for g in
            opt.param_groups] == [(g["lr"], g["momentum"], g["weight_decay"], len(g["params"]))
                                  for g in trainer.optimizer.param_groups]
    # The learning-rate advice follows the class the trial built (measure/window.py records it).
    assert "the linear rule for SGD" in learning_rate_words(16, 64, type(opt).__name__)
    # Exported without an optim the Trainer would ignore; apply keeps the instance, in place,
    # with the measured implementation flag.
    best = {"knobs": {**space.baseline, "optimizer_impl": "foreach"}, "device": {"type": "cpu"}}
    assert "optim" not in training_arguments_kwargs(best)
    sgd = trainer.optimizer
    hf.apply(trainer, best)
    assert trainer.optimizer is sgd and sgd.defaults["foreach"] is True


def test_without_an_optimizer_the_trainers_optim_is_measured(cpu_env: Env, tmp_path: Path) -> None:
    wl = build_workload(hf.trainer_parts(_trainer(tmp_path / "out")).spec(tmp_path / "shipped"))
    baseline = build_space(cpu_env, wl, {}).baseline
    assert baseline["optimizer"] == "adamw_torch"
    assert type(Training(wl, baseline, "cpu").optimizer) is torch.optim.AdamW


def test_an_optimizer_over_tensors_the_model_lacks_is_refused(tmp_path: Path) -> None:
    stray = torch.nn.Parameter(torch.zeros(3))
    trainer = _trainer(tmp_path / "out",
                       lambda m: torch.optim.SGD([*m.parameters(), stray], lr=0.1))
    with pytest.raises(WorkloadError, match="not parameters of its model"):
        hf.trainer_parts(trainer)


class OwnOptimizerTrainer(transformers.Trainer):
    """A Trainer subclass that picks its optimizer itself, as teams write them."""

    def create_optimizer(self) -> Any:
        if self.optimizer is None:
            self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=0.01, alpha=0.9)
        return self.optimizer


@pytest.mark.parametrize("how", ["optimizer_cls_and_kwargs", "create_optimizer"])
def test_an_optimizer_chosen_outside_optim_is_measured_and_verify_steps_it(
        how: str, cpu_env: Env, tmp_path: Path) -> None:
    """``Trainer(optimizer_cls_and_kwargs=...)`` and a subclass's ``create_optimizer``: the
    trials build that class with its hyper-parameters, the user's Trainer is left to build it
    in train() as it would have, and verify's Trainer steps the same class (hf/verify.py)."""
    from autotune.adapters.hf.verify import build_trainer

    trainer = _trainer(tmp_path / "out")
    if how == "optimizer_cls_and_kwargs":
        trainer.optimizer_cls_and_kwargs = (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9})
        expected, hyper = torch.optim.SGD, ("momentum", 0.9)
    else:
        trainer.__class__ = OwnOptimizerTrainer
        expected, hyper = torch.optim.RMSprop, ("alpha", 0.9)
    wl = build_workload(hf.trainer_parts(trainer).spec(tmp_path / "shipped"))
    assert trainer.optimizer is None  # built to be read, and taken off again
    opt = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu").optimizer
    assert type(opt) is expected and opt.param_groups[0][hyper[0]] == hyper[1]
    verifying = build_trainer(wl, str(tmp_path / "verify"), steps=2, device="cpu")
    assert type(verifying.optimizer) is expected


def test_only_a_trainer_that_steps_another_optimizer_sends_one(tmp_path: Path) -> None:
    from autotune.core.shipping import Shipped

    for optimizer, sent in ((None, False), (_sgd, True)):
        trainer = _trainer(tmp_path / "out", optimizer)
        spec = hf.trainer_parts(trainer).spec(tmp_path / f"shipped-{sent}")
        assert ("user_optimizer" in Shipped(spec["objects"])) is sent
