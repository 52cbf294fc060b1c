"""A Hugging Face ``Trainer`` script tuned with no changed line: the hook a script study puts
on ``transformers.Trainer`` in its own processes (``autotune -- python train.py ARGS``).

measure/framework_hooks.py imports this module by name when the script imports
``transformers.trainer``, in a discovery run and in each trial; ``install`` then wraps
``Trainer.__init__`` (TRL's ``SFTTrainer`` and any other subclass build through it):

- **discovery run**: the Trainer's arguments as the script built them are the study's
  baseline (adapters/hf/workload.py ``_defaults``: batch size, accumulation, workers, pinning,
  precision, compile, optimizer, checkpointing...), and the knobs its arguments hold are the
  ones the study searches, with the model's attention implementation where its class can
  switch it (adapters/hf/workload.py ``model_traits``); after two optimizer steps the run
  writes them down and ends;
- **trial** (and each side of ``autotune verify``): the trial's knobs go into the arguments
  before the Trainer builds its accelerator, loaders, precision and optimizer
  (hf.tuned_arguments, the global batch kept as best.yaml carries it), and onto the model
  what no field holds (its attention implementation and SDPA's backend around each training
  step, as ``hf.apply`` sets them), its outputs go to the trial's folder (no checkpoint, no report, nothing in the user's output_dir), and a
  callback reports each optimizer step to the trial's window: its samples, the time the loop
  waited in ``get_batch_samples`` for its micro-batches, and its loss; the window ends the
  process once it is measured, before evaluation, saving or upload.

What it does not reach: packing (set on the collator and the data, not the arguments), DDP's
arguments, the host allocator; they stay as the script sets them, and the study says so
(workloads/script.py LINES).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.adapters.hf import _model_settings, tuned_arguments
from autotune.adapters.hf.recipe import split_peft
from autotune.adapters.hf.workload import (
    HFWorkload,
    _defaults,
    model_settings,
    model_traits,
    training_arguments_kwargs,
)
from autotune.core import distributed, sequences
from autotune.core.host import apply_backend_flags, apply_cpu_threads
from autotune.production.meter import OUT_ENV, Meter
from autotune.production.settings import Source, resolve

#: The process-wide knobs a trial sets at the Trainer's construction (the host allocator and
#: CUDA's expandable segments must be set before the first allocation: not reached).
PROCESS_KNOBS = ("tf32", "cudnn_benchmark", "cpu_threads")
#: The torch optimizer class behind a Trainer's ``optim`` (the learning-rate rules ask for it).
OPTIMIZER_CLASSES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "adagrad": "Adagrad",
                     "rmsprop": "RMSprop"}
#: Marks a wrapped ``__init__`` (install runs once per process).
WRAPPED = "_autotune_hooked"


def install(module: ModuleType) -> None:
    """Wrap ``module.Trainer.__init__`` (``module``: transformers.trainer, just imported)."""
    cls = module.Trainer
    if getattr(cls.__init__, WRAPPED, False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        source = resolve(None)
        if source.mode == "own" and source.discover is None:  # a plain run: nothing to do
            original(self, *args, **kwargs)
            return
        model = kwargs.get("model", args[0] if args else None)
        if source.discover is not None and model is not None:
            _read_model(source, model)
        args, kwargs = _with_arguments(module, source, args, kwargs)
        original(self, *args, **kwargs)
        if source.discover is None:  # a trial, a side of verify, a run under best.yaml
            _model_settings(self, dict(source.best.knobs))
        _report_steps(self, source)

    setattr(__init__, WRAPPED, True)
    cls.__init__ = __init__


def _with_arguments(module: ModuleType, source: Source, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The Trainer's positional and keyword arguments with its TrainingArguments read (a
    discovery run) or tuned (a trial, a side of verify, a run under best.yaml);
    ``Trainer(model, args, ...)`` or ``args=``."""
    given = kwargs.get("args", args[1] if len(args) > 1 else None)
    if given is None:  # the Trainer's own default, made here so that it can be read or tuned
        given = module.TrainingArguments(output_dir="trainer_output")
    if source.discover is not None:
        _read(source, given)
        used = _quiet(given, Path(source.discover).parent)
    else:
        used = _tuned(source, given)
    if "args" in kwargs or len(args) <= 1:
        return args, {**kwargs, "args": used}
    return (args[0], used, *args[2:]), kwargs


def _read(source: Source, arguments: Any) -> None:
    """The script's own settings, as its arguments hold them, and the knobs they reach."""
    own = _defaults(arguments.to_dict())
    for knob, value in own.items():
        if knob != "grad_accum" and value is not None:
            source.setting(knob, value)
    source.own["grad_accum"] = int(own["grad_accum"])
    source.process, source.framework = PROCESS_KNOBS, "hf"
    source.limits = {k: [list(v), why] for k, (v, why) in HFWorkload.knob_limits.items()}
    optim = str(getattr(arguments.optim, "value", arguments.optim))
    source.optimizer = next((cls for key, cls in OPTIMIZER_CLASSES.items()
                             if optim.startswith(key)), "")


def _read_model(source: Source, model: Any) -> None:
    """The model's attention implementation, where its class can switch it: a knob the study
    then searches over the implementations the class supports. Checkpointing switched on on
    the model itself (PEFT's k-bit preparation, a user's ``gradient_checkpointing_enable()``)
    is the script's own though its arguments leave it off, as ``hf.tune`` reads it."""
    if sequences.model_checkpointing(split_peft(model)[1]) is not None:
        source.setting("activation_checkpointing", True)
    traits = model_traits(type(model), getattr(model, "config", None))
    if not traits["attention_choices"]:
        return
    source.traits = {"attention_choices": list(traits["attention_choices"]),
                     "attention_dropout": traits["attention_dropout"]}
    source.setting("attention", traits["attention_now"])


def _tuned(source: Source, arguments: Any) -> Any:
    """The arguments with the configuration's knobs (its process-wide ones applied now). A
    trial writes into its own folder only, evaluates and saves nothing: its window ends the
    process before the script's evaluation, and nothing of it is the user's output."""
    knobs = source.best.knobs
    apply_backend_flags(knobs)
    apply_cpu_threads(knobs)
    tuned = tuned_arguments(arguments, source.best)
    if source.window is not None:
        return _quiet(tuned, Path(source.window.result_path).parent)
    if os.environ.get(OUT_ENV):  # a side of verify: it ends at its window, writing nothing
        return _quiet(tuned, Path(os.environ[OUT_ENV]).parent)
    return tuned  # a full run under best.yaml (autotune apply): its outputs are the user's


def _quiet(arguments: Any, folder: Path) -> Any:
    """The arguments of a trial or a discovery run: outputs in ``folder``, no report,
    checkpoint, upload or evaluation (the run ends before them, and none is the user's)."""
    quiet: dict[str, Any] = {"output_dir": str(folder / "trainer-output"), "report_to": "none",
                             "save_strategy": "no", "push_to_hub": False,
                             "load_best_model_at_end": False}
    if hasattr(arguments, "eval_strategy"):
        quiet["eval_strategy"] = "no"
    return dataclasses.replace(arguments, **quiet)


def _report_steps(trainer: Any, source: Source) -> None:
    """Each optimizer step to the trial's window or the discovery run's count
    (``source.on_step``), or to the meter of a verify side: the samples of its micro-batches,
    the loop's wait for them, and its loss (a tensor, read only where the window needs it)."""
    meter = (Meter.from_best(source.best) if source.mode == "best" and os.environ.get(OUT_ENV)
             else None)
    if source.mode == "best" and meter is None:  # a full run: the arguments were all of it
        return
    waited = [0.0]
    losses: list[Any] = []
    fetch, train_step = trainer.get_batch_samples, trainer.training_step

    def get_batch_samples(*a: Any, **kw: Any) -> Any:
        if meter is not None:
            with meter.wait():
                return fetch(*a, **kw)
        t = time.perf_counter()
        out = fetch(*a, **kw)
        waited[0] += time.perf_counter() - t
        return out

    def training_step(*a: Any, **kw: Any) -> Any:
        loss = train_step(*a, **kw)
        losses.append(loss)
        return loss

    trainer.get_batch_samples, trainer.training_step = get_batch_samples, training_step

    def on_step_end(args: Any) -> None:
        micro = int(args.per_device_train_batch_size) * max(1, len(losses))
        loss = sum(losses) if losses else None  # the step's, as the Trainer logs it
        wait, waited[0] = waited[0], 0.0
        losses.clear()
        if meter is not None:
            meter.step(micro, loss=loss)
        else:
            source.on_step(micro * distributed.world_size(), wait, loss)

    import transformers

    class WindowSteps(transformers.TrainerCallback):  # type: ignore[misc]
        """The Trainer's optimizer steps, as a script's meter.step would report them."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            on_step_end(args)

    trainer.add_callback(WindowSteps())
    if source.window is not None:  # the first step's seconds count from here, not the imports
        source.window.meter_made()


def exports(best: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What an HfArgumentParser script's user applies, beside best.yaml: the TrainingArguments
    fields (training_args.yaml, as ``hf.tune`` writes it) and the same as command-line flags to
    append to the launch (argparse keeps a flag's last value, so they replace the script's
    own); fields that take a mapping (accelerator_config) are in the YAML only; and what no
    field holds (model_settings.yaml: the attn_implementation to build the model with, SDPA's
    backend), which no flag carries: ``autotune apply`` sets it on the model."""
    fields = training_arguments_kwargs(best)
    model = model_settings(best)
    flags = " ".join(f"--{k} {_flag(v)}" for k, v in fields.items()
                     if v is not None and not isinstance(v, (dict, list)))
    return {"training_args.yaml": fields,
            "training_args_flags.yaml": {
                "flags": flags,
                "how": "append these to the command you launch (an HfArgumentParser script "
                       "takes a flag's last value), or run it unchanged with autotune apply "
                       "STUDY -- python train.py ARGS"},
            **({"model_settings.yaml": model} if model else {})}


def _flag(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
