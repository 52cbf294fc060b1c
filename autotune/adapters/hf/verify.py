"""One side of ``autotune verify`` for a Hugging Face study: the user's own ``Trainer.train``.

The baseline side builds the Trainer as the user did (their Trainer class, model, dataset,
collator, callbacks and TrainingArguments); the exported side builds the same Trainer and
then calls ``autotune.adapters.hf.apply(trainer, best)``, exactly what the README tells a user
to do, so verify measures that call too. Both train ``warmup + steps`` optimizer steps
(``max_steps``; no checkpoints, no external loggers: verify runs offline) and a callback times
each step (autotune/production/parity.StepClock). Arguments: autotune/production/parity.py.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import torch

from autotune.adapters.hf import apply, user_optim
from autotune.adapters.hf.workload import HFTrainerWorkload, HFWorkload
from autotune.core.quick_exit import quick_exit
from autotune.production.best import load_best
from autotune.production.parity import StepClock, load_workload, side_args, write


def build_trainer(workload: HFWorkload, output_dir: str, steps: int, device: str) -> Any:
    """The user's Trainer with their arguments (of their arguments class: an SFTConfig for an
    SFTTrainer), running ``steps`` optimizer steps."""
    from transformers import Trainer, TrainingArguments

    shipped = workload.shipped if isinstance(workload, HFTrainerWorkload) else None
    fields = dict(shipped["all_training_args"]) if shipped else dict(workload.args)
    fields.update(output_dir=output_dir, max_steps=steps, save_strategy="no", report_to="none",
                  push_to_hub=False, eval_strategy="no", load_best_model_at_end=False)
    if device == "cpu":
        fields["use_cpu"] = True
    cls = shipped["trainer_class"] if shipped else Trainer
    callbacks = list(shipped["callbacks"]) if shipped else []
    kwargs: dict[str, Any] = {"model": _users_model(workload), "train_dataset": workload.data,
                              "data_collator": workload.collator, "callbacks": callbacks}
    if shipped is not None and "sft" in shipped:
        # The dataset as SFTTrainer prepared it (tokenized, truncated, packed): not again.
        fields["dataset_kwargs"] = {**(fields.get("dataset_kwargs") or {}),
                                    "skip_prepare_dataset": True}
        kwargs["processing_class"] = shipped["processing_class"]
        if shipped["sft"]["trl_collator"]:
            kwargs["data_collator"] = None  # TRL's own, built from the SFTConfig as before
    args_class = shipped["args_class"] if shipped and "args_class" in shipped else TrainingArguments
    kwargs["args"] = args_class(**fields)
    if isinstance(workload, HFTrainerWorkload) and workload.user_optimizer is not None:
        # The optimizer the user's Trainer steps (an instance given, optimizer_cls_and_kwargs,
        # their create_optimizer): that class over this model, as the trials measured it;
        # apply() sets the side's fused/foreach flags on it. The Trainer's own scheduler.
        kwargs["optimizers"] = (user_optim.build(workload.user_optimizer, kwargs["model"]), None)
    try:
        return cls(**kwargs)
    except TypeError:  # a Trainer subclass whose constructor takes other arguments
        kwargs.pop("processing_class", None)
        return Trainer(**kwargs)


def _users_model(workload: HFWorkload) -> Any:
    """The model as the user handed it to their Trainer: rebuilt from its recipe without what
    the Trainer itself adds (an SFTTrainer adds TRL's fused LM head again)."""
    if isinstance(workload, HFTrainerWorkload) and "model_recipe" in workload.shipped:
        return workload.shipped.fresh("model_recipe").build(patches=False)
    if isinstance(workload, HFTrainerWorkload):
        return workload.shipped.fresh("model")
    return workload.model()


def count_tokens_of(trainer: Any) -> list[int | None]:
    """The real tokens of each micro-batch the Trainer trains on, summed per optimizer step
    (the list's last entry): its ``training_step`` receives the collated batch on the host,
    before it moves it to the device, so the count waits on nothing (core/tokens.py)."""
    from autotune.core.tokens import count_tokens

    step_tokens: list[int | None] = [0]
    training_step = trainer.training_step

    def counted(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        count = count_tokens(inputs)
        if count is None or step_tokens[-1] is None:
            step_tokens[-1] = None
        else:
            step_tokens[-1] += count.real
        return training_step(model, inputs, *args, **kwargs)

    trainer.training_step = counted
    return step_tokens


def timer(clock: StepClock, samples_per_step: int,
          step_tokens: list[int | None] | None = None) -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """on_step_begin comes after the step's batches are fetched; on_step_end after the
        optimizer step: between them, the step; between an end and the next begin, the next
        batch and the Trainer's own per-step work (logging, callbacks, progress bar)."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.begin()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.end(samples_per_step, step_tokens[-1] if step_tokens else None)
            if step_tokens:
                step_tokens[-1] = 0

    return StepTimer()


def main(argv: Sequence[str] | None = None) -> None:
    args = side_args(argv)
    workload = load_workload(args)
    assert isinstance(workload, HFWorkload), type(workload)
    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(workload, out, args.warmup + args.steps, args.device)
        if args.side == "exported":
            trainer = apply(trainer, load_best(args.config, check_environment=False))
        a = trainer.args
        clock = StepClock(args.warmup, torch.device(a.device.type))
        trainer.add_callback(timer(clock, a.per_device_train_batch_size * a.gradient_accumulation_steps,
                                   count_tokens_of(trainer)))
        trainer.train()
        clock.finish()
    write(args, {**clock.result(), "batch_size": a.per_device_train_batch_size,
                 "grad_accum": a.gradient_accumulation_steps, "bf16": a.bf16,
                 "workers": a.dataloader_num_workers})


if __name__ == "__main__":
    main(sys.argv[1:])
    quick_exit(0)  # a side's process ends so: parity.py's docstring
