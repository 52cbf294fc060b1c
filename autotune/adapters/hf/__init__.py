"""Hugging Face Transformers: tune the Trainer you hold, apply the result to it in one call, and
read the result as ``TrainingArguments``.

    from autotune.adapters import hf

    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=collator)
    tuned = hf.tune(trainer, overrides=["study.n_trials=8"])   # a study on the Trainer's objects
    tuned.training_args                                         # the tuned TrainingArguments
    tuned.apply(trainer).train()                                # every measured setting applied

``tune`` ships the Trainer's model (as its recipe where it was loaded with ``from_pretrained``:
autotune/adapters/hf/recipe.py), train dataset, collator and arguments to the trial processes
(autotune/core/shipping.py; an object that cannot travel is named; a TRL SFTTrainer as such:
autotune/adapters/hf/trl.py), runs the study
(autotune.tune: the same study as the command line) and returns ``HFTuned``. ``apply(trainer,
best)`` sets every knob the study measured: the TrainingArguments fields (batch size, mixed
precision, TF32, torch.compile, the DataLoader fields, the fused optimizer, non_blocking), and
what no TrainingArguments field holds, in this process: glibc's allocator (before the loader
forks its workers), the torch threads of this process and of each loader worker, cuDNN's
autotuning, the collator's ``pad_to_multiple_of``. ``autotune verify`` then measures the
realized speedup of ``Trainer.train`` itself (autotune/adapters/hf/verify.py).

The study by import paths (``workload._target_=autotune.adapters.hf.HFWorkload``) is in
autotune/adapters/hf/workload.py; both write ``training_args.yaml``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.adapters import best_document, in_process, keeps_own_accumulation
from autotune.adapters.ddp import (
    accelerator_ddp_kwargs,
    launched,
    merged_accelerator_config,
    syncs_each_batch,
)
from autotune.adapters.fsdp import HF_CPU_SHARDING, set_plugin_precision, sharded_study
from autotune.adapters.hf import user_optim
from autotune.adapters.hf.recipe import model_travel, split_peft
from autotune.adapters.hf.trl import is_sft, sft_parts
from autotune.adapters.hf.workload import (
    _CHECKPOINTING_FIELDS,
    _DDP_FIELDS,
    _SPEED_FIELDS,
    _STEP_FIELDS,
    _VERSIONED,
    HFTrainerWorkload,
    HFWorkload,
    training_arguments_kwargs,
    version_field,
)
from autotune.core import sequences
from autotune.core.host import apply_process_knobs, worker_init
from autotune.core.optimizer_impl import apply_optimizer_impl, optimizer_kwargs
from autotune.core.shipping import ToShip
from autotune.core.training import with_padding
from autotune.production.best import BestConfig, load_best, warn_training_changes

__all__ = ["HFTrainerWorkload", "HFTuned", "HFWorkload", "apply", "training_arguments_kwargs",
           "tune", "tuned_arguments"]


@dataclasses.dataclass
class HFTuned:
    """A study's result for a Trainer: ``best`` (best.yaml read back), ``training_args`` (the
    Trainer's own TrainingArguments with the tuned fields), ``apply(trainer)`` (best.yaml's
    answer) and ``same_training()`` (the answer that trains the same model as yours)."""

    best: BestConfig
    own_args: Any
    collator: Any = None

    @functools.cached_property
    def training_args(self) -> Any:
        """Made when first read, not by ``tune``: transformers resets accelerate's
        process-wide state whenever TrainingArguments are made, so a Trainer built before
        them trains again only after ``apply(trainer)`` (or as a new Trainer built from
        them). ``tune`` itself leaves the Trainer it was given ready to train as it is."""
        return tuned_arguments(self.own_args, self.best, self.collator)

    def apply(self, trainer: Any) -> Any:
        return apply(trainer, self.best)

    def same_training(self) -> BestConfig | None:
        """The answer that trains the same model as the Trainer did (its global batch, its
        arithmetic class aside: docs/guide/choosing.md): best.yaml where it does, else
        best-same-training.yaml beside it; None where no such configuration was shown faster
        than the Trainer's own (train as it is)."""
        section = self.best.document.get("training") or {}
        if not (section.get("this") or {}).get("changes"):
            return self.best
        other = section.get("other")
        if not other or not self.best.source:
            return None
        return load_best(Path(self.best.source).parent / other["file"], check_environment=False)


def tune(trainer: Any, overrides: Sequence[str] = (), *, ship_weights: bool = False,
         **kwargs: Any) -> HFTuned:
    """Tune ``trainer``'s training speed (before ``trainer.train()``): a study whose baseline
    is the Trainer as it is, run on its own model, data and arguments (a TRL ``SFTTrainer``
    too: autotune/adapters/hf/trl.py). ``overrides`` and ``kwargs`` are autotune.tune's
    (``device="cpu"``, ``n_trials=8``, ``name=...``). A model loaded with ``from_pretrained``
    travels to the trials as its recipe (autotune/adapters/hf/recipe.py); ``ship_weights=True``
    sends its weights instead, as any other model's are. Raises
    ``autotune.core.shipping.CannotTravel`` naming an object that cannot reach the trials, and
    autotune.tune's exceptions; one that still exported a configuration (``CouldNotMeasure`` on
    a busy machine, ``RegressionFound``) carries this result for it as ``tuned``."""
    # Imported here, not above: a trial process imports this module to build the workload
    # (workload._target_=autotune.adapters.hf.HFWorkload) and must not load the driver.
    from autotune.cli.api import StudyError
    from autotune.cli.api import tune as tune_study

    try:
        best = tune_study(list(overrides), workload=trainer_parts(trainer, ship_weights), **kwargs)
    except StudyError as exc:
        if exc.best is not None:
            exc.tuned = HFTuned(exc.best, trainer.args, trainer.data_collator)
        raise
    return HFTuned(best, trainer.args, trainer.data_collator)



def trainer_parts(trainer: Any, ship_weights: bool = False) -> ToShip:
    """What of a Trainer the trials need: its model (all of it: frozen layers and adapters
    decide the step's cost; as its recipe where it has one), the train dataset and collator
    as its own train DataLoader gets them (unused columns removed), and its arguments (all of
    them, of its own arguments class, for verify's Trainer)."""
    loader = trainer.get_train_dataloader()
    model = trainer.model
    args = trainer.args
    fields = {k: getattr(args, k) for k in _STEP_FIELDS + _SPEED_FIELDS + _VERSIONED + _DDP_FIELDS
              if hasattr(args, k)}
    if "train_sampling_strategy" in fields:
        fields["train_sampling_strategy"] = str(getattr(fields["train_sampling_strategy"], "value",
                                                        fields["train_sampling_strategy"]))
    fields["accelerator_config"] = {
        "non_blocking": bool(args.accelerator_config.non_blocking),
        "gradient_accumulation_kwargs": {  # sync_each_batch: the baseline's accumulation_no_sync
            "sync_each_batch": syncs_each_batch(args.accelerator_config)}}
    fields["optim"] = str(getattr(args.optim, "value", args.optim))
    fields.update(_checkpointing_on_the_model(model, fields))
    init = {f.name for f in dataclasses.fields(type(args)) if f.init}
    # to_dict masks every field named *_token: SFTConfig's pad_token and eos_token are the
    # user's values (the hub token stays masked: verify runs offline).
    every = {k: getattr(args, k) if k.endswith("_token") and "hub" not in k else v
             for k, v in args.to_dict().items() if k in init and not k.startswith("_")}
    travel = model_travel(model, by_value=ship_weights)
    key = "model_recipe" if travel.is_recipe else "model"
    if travel.by_value_why and not ship_weights and getattr(split_peft(model)[1], "name_or_path", ""):
        warnings.warn(f"autotune: {travel.words}", stacklevel=3)
    base = split_peft(model)[1]
    parts = {key: travel.part, "dataset": loader.dataset, "collator": loader.collate_fn,
             "training_args": fields, "all_training_args": every, "trainer_class": type(trainer),
             "args_class": type(args), "model_config": getattr(model, "config", None),
             "callbacks": _user_callbacks(trainer),
             "model_name": f"{type(model).__module__}.{type(model).__qualname__}",
             "model_class": f"{type(base).__module__}.{type(base).__qualname__}",
             "dataset_name": f"{type(loader.dataset).__name__} of {len(loader.dataset)} rows"}
    own = _own_optimizer(trainer)
    if own is not None:  # the one it steps, where args.optim does not say it
        parts["user_optimizer"] = user_optim.describe(own, model)
    names = {"model": "the Trainer's model", "model_recipe": "the Trainer's model's recipe",
             "dataset": "the Trainer's train_dataset", "collator": "the Trainer's data_collator",
             "trainer_class": "the Trainer's class", "callbacks": "the Trainer's callbacks",
             "processing_class": "the SFTTrainer's processing_class",
             "user_optimizer": "the Trainer's optimizer"}
    target = "autotune.adapters.hf.workload.HFTrainerWorkload"
    if is_sft(trainer):
        parts.update(sft_parts(trainer))
        kind = "SFTTrainerWorkload" if parts["sft"]["trl_collator"] else "SFTOwnCollatorWorkload"
        target = f"autotune.adapters.hf.trl.{kind}"
    return ToShip(parts, names, target=target, label=f"hf-{type(model).__name__.lower()}",
                  on_cpu=[key], said=travel.words)


def _user_callbacks(trainer: Any) -> list[Any]:
    """The callbacks the user added (the Trainer adds its defaults again itself); one that
    cannot travel is left out, with a warning (verify then runs without it)."""
    from transformers.trainer import DEFAULT_CALLBACKS, DEFAULT_PROGRESS_CALLBACK
    from transformers.trainer_callback import PrinterCallback

    defaults = {*DEFAULT_CALLBACKS, DEFAULT_PROGRESS_CALLBACK, PrinterCallback}
    out = []
    for cb in trainer.callback_handler.callbacks:
        if type(cb) in defaults or type(cb).__module__.startswith("transformers.integrations"):
            continue
        try:
            import cloudpickle

            cloudpickle.dumps(cb)
            out.append(cb)
        except Exception as exc:  # noqa: BLE001 - verify runs without it, and says so here
            warnings.warn(f"autotune: the Trainer's callback {type(cb).__name__} cannot be sent "
                          f"to autotune verify's processes ({exc}); verify runs without it.",
                          stacklevel=3)
    return out


def tuned_arguments(args: Any, best: Any, collator: Any = None) -> Any:
    """``args`` (the Trainer's TrainingArguments, or TRL's SFTConfig) with every field the
    study tuned; the user's other fields (output_dir, epochs, logging, evaluation...) as they
    were, and their own keys of the fields that are dicts (``accelerator_config``,
    ``gradient_checkpointing_kwargs``) beside the tuned ones. An SFTConfig gets ``padding_free``
    where the study's packing differs from what TRL does with the user's and TRL's own
    collator packs (``collator``: the Trainer's; hf/trl.py)."""
    tuned = training_arguments_kwargs(best)
    # A best.yaml written before grad_accum was carried: the Trainer's own accumulation stays.
    keeps_own_accumulation(best_document(best), args.gradient_accumulation_steps,
                           "gradient_accumulation_steps", args.per_device_train_batch_size)
    accel = args.accelerator_config
    accel = accel.to_dict() if hasattr(accel, "to_dict") else dict(accel or {})
    tuned["accelerator_config"] = merged_accelerator_config(accel, tuned["accelerator_config"])
    for name, value in tuned.items():
        own = getattr(args, name, None)
        if name.endswith("_kwargs") and isinstance(own, dict) and isinstance(value, dict):
            tuned[name] = {**own, **value}
    knobs = best_document(best)["knobs"]
    if hasattr(args, "padding_free") and "padding_free" in knobs and (
            collator is None or sequences.switches_packing(collator)):
        trl_packs = args.padding_free or (getattr(args, "packing", False) and getattr(
            args, "packing_strategy", None) in ("bfd", "bfd_split"))
        if bool(knobs["padding_free"]) != bool(trl_packs):
            tuned["padding_free"] = bool(knobs["padding_free"])
    return dataclasses.replace(args, **tuned)


def apply(trainer: Any, best: BestConfig | str | Path | dict[str, Any]) -> Any:
    """Apply ``best`` to ``trainer`` in place (before ``train()``) and return it: its
    TrainingArguments (and the Accelerator they configure: mixed precision, compile), then
    what no field holds, in this process: the host allocator, the CPU threads (this process
    and each loader worker), cuDNN autotuning, TF32 matmuls, the collator's padding; for a
    study launched as ranks, the Accelerator's DDP arguments (gradient_as_bucket_view, the
    comm hook, batched_grad_copy: adapters/ddp.py)."""
    doc = best_document(best)
    knobs = doc["knobs"]
    warn_training_changes(doc)
    apply_process_knobs(knobs)  # before the Trainer's DataLoader forks its workers
    new = tuned_arguments(trainer.args, doc, trainer.data_collator)
    # What the Trainer's own hyper-parameter search does to a live Trainer with new arguments
    # (Trainer._hp_search_setup): the batch size it caches, the Accelerator they configure.
    trainer.args = new
    trainer._train_batch_size = new.train_batch_size
    trainer.create_accelerator_and_postprocess()
    if trainer.optimizer is not None and knobs.get("optimizer", "") is None:
        # The Trainer's own optimizer, measured as it is: kept, with the measured flags.
        apply_optimizer_impl(trainer.optimizer, **optimizer_kwargs(knobs))
    if sharded_study(doc):  # the shards' mixed precision, which no field holds (adapters/fsdp.py)
        if not set_plugin_precision(trainer.accelerator, doc):
            warnings.warn(f"autotune: the study measured sharding={knobs['sharding']}, but this "
                          "Trainer's Accelerator has no FSDP plugin (one process, or CPU ranks: "
                          f"{HF_CPU_SHARDING}); it trains unsharded.", stacklevel=2)
    elif launched(doc):  # the DDP arguments no TrainingArguments field holds (adapters/ddp.py)
        accelerator = trainer.accelerator
        accelerator.ddp_handler = accelerator_ddp_kwargs(accelerator.ddp_handler, doc)
    _loader_settings(trainer, knobs)
    _model_settings(trainer, knobs)
    return trainer


def _own_optimizer(trainer: Any) -> Any:
    """The optimizer the Trainer steps where ``TrainingArguments.optim`` does not say it: an
    instance given (``optimizers=(opt, ...)``), else the one it would build where the user
    chose it otherwise: ``optimizer_cls_and_kwargs=``, or a Trainer subclass's own
    ``create_optimizer`` / ``get_optimizer_cls_and_kwargs`` (built here through the Trainer's
    own ``create_optimizer``, then taken off the Trainer again, so its ``train()`` builds it as
    it would have). None: the Trainer builds ``args.optim``."""
    if trainer.optimizer is not None:
        return trainer.optimizer
    cls = type(trainer)
    custom = [name for name in ("create_optimizer", "get_optimizer_cls_and_kwargs")
              if _defined_outside_the_libraries(cls, name)]
    if getattr(trainer, "optimizer_cls_and_kwargs", None) is None and not custom:
        return None
    try:
        return trainer.create_optimizer()
    finally:
        trainer.optimizer = None


def _defined_outside_the_libraries(cls: type, name: str) -> bool:
    """Whether ``cls``'s ``name`` is the user's own (not transformers' or TRL's)."""
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    module = getattr(owner, "__module__", "") or ""
    return owner is not None and not module.startswith(("transformers.", "trl."))


def _checkpointing_on_the_model(model: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """The baseline is the run as it is: checkpointing switched on on the model itself (PEFT's
    ``prepare_model_for_kbit_training``, the QLoRA recipe) is the user's, although their
    arguments leave it off; the recipe rebuild would drop it, so the arguments the trials read
    say it, with its ``use_reentrant``."""
    on = sequences.model_checkpointing(split_peft(model)[1])
    field = version_field(_CHECKPOINTING_FIELDS)
    if on is None or field is None or fields.get(field):
        return {}
    out: dict[str, Any] = {field: True}
    if on and not fields.get(f"{field}_kwargs"):
        out[f"{field}_kwargs"] = on
    return out


def _model_settings(trainer: Any, knobs: dict[str, Any]) -> None:
    """What no TrainingArguments field holds about the model: its attention implementation,
    SDPA's backend around each forward and backward (the Trainer's ``training_step``: a
    checkpointed layer runs its forward again in backward, and with the backend around
    ``compute_loss`` only, ``train()`` with gradient checkpointing raised CheckpointError), and
    its cache off for packed batches (core/sequences.prepare_model). Checkpointing is the
    Trainer's own field, switched on by ``train()``; switched off here where the model itself
    came checkpointing and the answer measured it off."""
    # Checkpointing on: the Trainer's own field switches it on in train(); off: a model that
    # came checkpointing (PEFT's k-bit preparation) is switched off here.
    sequences.prepare_model(trainer.model, {**knobs, "activation_checkpointing":
                                            None if knobs.get("activation_checkpointing") else False})
    if knobs.get("attention") not in sequences.SDPA_BACKENDS:
        return
    training_step = trainer.training_step

    def with_backend(*args: Any, **kwargs: Any) -> Any:
        with sequences.attention_backend(knobs):
            return training_step(*args, **kwargs)

    trainer.training_step = with_backend


def _loader_settings(trainer: Any, knobs: dict[str, Any]) -> None:
    """The two loader settings TrainingArguments has no field for, set on the Trainer's own
    train DataLoader as it is built: each worker's torch threads, the collator's padding."""
    trainer.data_collator = sequences.collator(with_padding(trainer.data_collator, knobs), knobs)
    build = trainer.get_train_dataloader

    def get_train_dataloader() -> Any:
        loader = build()
        if loader.num_workers:
            loader.worker_init_fn = worker_init(knobs, loader.worker_init_fn)
        return loader

    trainer.get_train_dataloader = get_train_dataloader


def unapplied(best: Any) -> dict[str, Any]:
    """Measured settings that ``training_arguments_kwargs`` alone does not carry (no
    TrainingArguments field holds them): ``apply(trainer, best)`` sets them."""
    return in_process(best_document(best)["knobs"])
