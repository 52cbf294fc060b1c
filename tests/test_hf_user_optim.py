"""The Trainer's own optimizer (``Trainer(optimizers=(SGD(...), None))``) is what the study
measures, advises for and keeps (adapters/hf_user_optim.py): the Trainer steps the instance it
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
from autotune.adapters.hf_workload import training_arguments_kwargs  # noqa: E402

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
