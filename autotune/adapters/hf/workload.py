"""A Hugging Face ``transformers`` model, a dataset and a data collator as an autotune Workload
(the trial side of the adapter; the user-facing module is ``autotune.adapters.hf``), and the
result as ``TrainingArguments`` fields.

    autotune workload._target_=autotune.adapters.hf.HFWorkload \\
        +workload.model=transformers.GPT2LMHeadModel \\
        +workload.config=transformers.GPT2Config +workload.config_args='{n_layer: 2}' \\
        +workload.dataset=my_pkg.data.tokenized_train +workload.dataset_args='{seq_len: 128}' \\
        +workload.training_args='{per_device_train_batch_size: 16, bf16: true}'

The model is built from its config (random weights, nothing downloaded: speed does not depend
on the weights' values). Batches are the collator's dicts (input_ids, attention_mask, labels);
the model is called with them as keywords and computes its own loss, as in ``Trainer``. The
step is the Trainer's: the optimizer its ``optim`` names, built as the Trainer builds it
(adapters/hf/optim.py: any value the installed transformers accepts), gradients clipped to
``max_grad_norm`` after unscaling, before each optimizer step (default 1.0: a real per-step
cost; core/training.py clips), zero_grad to None. ``training_args`` holds the user's current TrainingArguments fields: trial 0 runs them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.adapters import accumulation, best_document, load_object
from autotune.adapters.ddp import (
    gradient_accumulation_kwargs,
    syncs_each_batch,
    trainer_find_unused,
    training_arguments_ddp,
    user_ddp_defaults,
)
from autotune.adapters.fsdp import HF_CPU_SHARDING, HF_LIMITS, training_arguments_fsdp
from autotune.adapters.hf import user_optim
from autotune.adapters.hf.optim import IMPL_OPTIM as IMPL_OPTIM  # noqa: I001 - re-exported
from autotune.adapters.hf.optim import OPTIM_IMPL as OPTIM_IMPL
from autotune.adapters.hf.optim import (
    build,
    checked,
    clip_norm,
    impl_name,
    optimizer_defaults,
    trainer_optim,
)
from autotune.core import sequences
from autotune.core.batch import measure_shapes
from autotune.core.shipping import Shipped
from autotune.core.workload import Workload, WorkloadError, resolve_target


@functools.cache
def training_argument_fields() -> dict[str, Any]:
    """The installed transformers' TrainingArguments fields and their defaults."""
    try:
        from transformers import TrainingArguments
    except ImportError as exc:
        raise WorkloadError(
            "The Hugging Face adapter needs transformers and accelerate: pip install -e '.[hf]' "
            f"(import failed: {exc})."
        ) from exc
    return {f.name: f.default for f in dataclasses.fields(TrainingArguments) if f.init}


class HFWorkload(Workload):
    """``model``: a transformers model class (built with ``from_config`` / ``Model(config)``
    from ``config`` + ``config_args``) or, without ``config``, a factory called with
    ``model_args``. ``dataset``: a factory (with ``dataset_args``) returning a map-style
    dataset of dicts. ``collator``: a data collator class (with ``collator_args``) or function;
    default ``transformers.default_data_collator``. ``training_args``: the TrainingArguments
    fields the user trains with today."""

    name = "hf"
    knob_limits = {
        "cuda_graphs": ([False], "the Trainer has no whole-step CUDA Graph (torch_compile_mode="
                                 "reduce-overhead is its way to graphs)"),
        "set_to_none": ([True], "the Trainer calls model.zero_grad(), which sets gradients to None"),
        "optimizer_impl": (["default", "fused"], "TrainingArguments.optim offers adamw_torch "
                                                 "(torch's default) and adamw_torch_fused"),
        **HF_LIMITS,
    }
    cpu_sharding = HF_CPU_SHARDING
    #: The Trainer's own optimizer instance, as adapters/hf/user_optim.py rebuilds it (None:
    #: the Trainer builds TrainingArguments.optim).
    user_optimizer: dict[str, Any] | None = None
    #: The verify side for this workload: the user's Trainer.train (autotune/production/verify.py).
    verifier = "autotune.adapters.hf.verify"

    def __init__(self, model: str, dataset: str, config: str | None = None,
                 config_args: Mapping[str, Any] | None = None,
                 model_args: Mapping[str, Any] | None = None,
                 dataset_args: Mapping[str, Any] | None = None, collator: str | None = None,
                 collator_args: Mapping[str, Any] | None = None,
                 training_args: Mapping[str, Any] | None = None,
                 static_shapes: bool | None = None):
        """``static_shapes``: None measures it (8 batches drawn through the collator: a
        padding collator gives batches of varying shapes); True/False states it."""
        training_argument_fields()  # transformers first: without it, say which extra to install
        self.model_path, self.config_path = model, config
        self.config_args, self.model_args = dict(config_args or {}), dict(model_args or {})
        self.dataset_path = dataset
        cfg = load_object(config, self.config_args, "config") if config else None
        self._model_traits(resolve_target(model), cfg)
        self._configure(training_args, load_object(dataset, dataset_args, "dataset"),
                        _collator(collator, collator_args), static_shapes)

    def _model_traits(self, cls: Any, config: Any) -> None:
        t = model_traits(cls, config)
        self.attention_choices, self.attention_dropout = t["attention_choices"], t["attention_dropout"]
        self.attention_now: str = t["attention_now"]
        self.checkpointable, self.packs_sequences = t["checkpointable"], t["packs_sequences"]
        #: Its config's model_type: which Liger kernels apply (core/llm_domains.liger_kernel).
        self.model_type: str | None = t["model_type"]

    def sample_lengths(self) -> list[int] | None:
        return sequences.sample_lengths(self.data)

    def _configure(self, training_args: Mapping[str, Any] | None, data: Dataset,
                   collator: Callable[[list[Any]], Any], static_shapes: bool | None) -> None:
        """What both ways in (import paths, a live Trainer's objects) set up alike."""
        fields = training_argument_fields()
        self.args = dict(training_args or {})
        unknown = sorted(k for k in self.args if k not in fields)
        if unknown:
            raise WorkloadError(
                f"workload.training_args: {', '.join(unknown)} not TrainingArguments field(s) of "
                f"the installed transformers. Valid fields include: {', '.join(_SPEED_FIELDS)}.")
        self.full_args = {k: self.args.get(k, fields[k]) for k in _STEP_FIELDS + _SPEED_FIELDS}
        self.full_args.update({k: self.args.get(k, fields[k]) for k in _VERSIONED + _DDP_FIELDS
                               if k in fields})
        # Any optimizer the installed TrainingArguments accepts: built as the Trainer builds it
        # (adapters/hf/optim.py), kept as it is unless the search has its other forms.
        self.full_args["optim"] = checked(self.full_args["optim"])
        self.max_grad_norm = clip_norm(self.full_args)  # the Trainer's clipping, after unscaling
        self.data, self.collator = data, collator
        user_collator = sequences.unwrapped(collator)  # inside the Trainer's column remover
        self.pads_to_multiple = hasattr(user_collator, "pad_to_multiple_of")
        flattening = sequences.packs(user_collator)  # transformers' or TRL's packing
        self.defaults = {**_defaults(self.full_args),
                         "pad_to_multiple_of": getattr(user_collator, "pad_to_multiple_of", None),
                         "attention": self.attention_now, "padding_free": flattening}
        self.input_shapes = measure_shapes(data, collator, self.defaults["batch_size"])
        self.static_shapes = (self.input_shapes["distinct"] == 1 if static_shapes is None
                              else bool(static_shapes))
        # Padded sequences as the batches say (an attention_mask with zeros, labels -100 on
        # the padding), whatever collates them: a transformers collator, a plain function, a
        # class of the user's; a packing collator already removed the padding it would add.
        self.pads_batches = self.input_shapes["padded"] > 0 or flattening
        if self.defaults["length_grouping"]:
            # Checked by the command line before any trial (cli/app.py) under launch.nproc_per_node.
            self.not_launchable = (
                "its TrainingArguments group samples by length, and each rank's sampler in the "
                "trials is a DistributedSampler (the length_grouping knob is off under ranks), so "
                "no trial would run your sampling; set train_sampling_strategy='random' "
                "(group_by_length=False) to tune it under ranks")

    def ddp_arguments(self, model: nn.Module, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """The Trainer's ``find_unused_parameters`` under torchrun (adapters/ddp.py)."""
        return {"find_unused_parameters": trainer_find_unused(
            model, knobs, self.full_args.get("ddp_find_unused_parameters"))}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return self.data

    def collate_fn(self) -> Callable[[list[Any]], Any] | None:
        return self.collator

    def model(self) -> nn.Module:
        if self.config_path is None:
            built = load_object(self.model_path, self.model_args, "model")
        else:
            cfg = load_object(self.config_path, self.config_args, "config")
            cls = resolve_target(self.model_path)
            factory = getattr(cls, "from_config", None) or cls
            built = factory(cfg, **self.model_args)
        if not isinstance(built, nn.Module):
            raise WorkloadError(f"model={self.model_path!r} built a {type(built).__name__}, "
                                "not a torch nn.Module.")
        return built

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        loss = getattr(outputs, "loss", None)
        if loss is None and isinstance(outputs, Mapping):
            loss = outputs.get("loss")
        if loss is None:
            raise RuntimeError(
                f"{self.model_path} returned no loss: the batches need 'labels' (from the "
                "dataset or the collator) so the model computes its own loss, as in Trainer.")
        return loss

    def optimizer(self, params: Iterable[nn.Parameter], model: nn.Module | None = None,
                  optim: str | None = None, **impl: Any) -> torch.optim.Optimizer:
        """The Trainer's optimizer (adapters/hf/optim.py): ``optim``, the ``optimizer`` knob
        (default: the user's own), torch's AdamW fused where ``impl`` says so; its parameter
        groups and the bitsandbytes embedding rule from ``model``. Its ``max_grad_norm`` is
        clipped by the step (core/training.py), after GradScaler unscales, as in the Trainer."""
        if self.user_optimizer is not None:  # Trainer(optimizers=(opt, ...)): that class
            return user_optim.build(self.user_optimizer, model, params, **impl)
        own = optimizer_defaults(self.full_args["optim"])["optimizer"]
        name = trainer_optim({"optimizer": optim or own, "optimizer_impl": impl_name(impl)})
        return build(self.full_args, name, params, model)

    def describe(self) -> str:
        return f"hf {self.model_path} ({self.config_path or 'factory'}) on {self.dataset_path}"

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        out = {"training_args.yaml": training_arguments_kwargs(best)}
        model = model_settings(best)
        if model:
            out["model_settings.yaml"] = model
        return out


class HFTrainerWorkload(HFWorkload):
    """A live ``transformers.Trainer``'s objects, shipped to the trial processes by
    ``autotune.adapters.hf.tune(trainer)`` (autotune/core/shipping.py): its model (as its
    recipe where it was loaded with ``from_pretrained``: autotune/adapters/hf/recipe.py), its
    train dataset and collator (as its own train DataLoader gets them: unused columns
    removed), and its TrainingArguments fields."""

    def __init__(self, objects: str, name: str = "hf-trainer", static_shapes: bool | None = None):
        self.shipped = Shipped(objects)
        self.model_path, self.config_path = self.shipped["model_name"], None
        self.dataset_path = f"the Trainer's train_dataset ({self.shipped['dataset_name']})"
        self.name = name
        config = self.shipped["model_config"] if "model_config" in self.shipped else None
        # The traits are the transformers model's, under PEFT's wrapper where there is one.
        traits = self.shipped["model_class"] if "model_class" in self.shipped else self.model_path
        self._model_traits(resolve_target(traits), config)
        self._configure(self.shipped["training_args"], self.shipped["dataset"],
                        self.shipped["collator"], static_shapes)
        if "user_optimizer" in self.shipped:  # Trainer(optimizers=(opt, ...)): that one
            self._own_optimizer(self.shipped["user_optimizer"])

    def _own_optimizer(self, spec: dict[str, Any]) -> None:
        """The Trainer's own optimizer instance as the baseline (adapters/hf/user_optim.py):
        no ``optim`` (the Trainer ignores it), its implementation flags searched within what
        its class takes."""
        self.user_optimizer = spec
        flags = user_optim.takes(spec["cls"])
        self.defaults = {**self.defaults, "optimizer": None, "optimizer_impl": spec["impl"]}
        self.knob_limits = {**self.knob_limits, "optimizer_impl": (
            ["default", *flags], f"the Trainer's own {spec['cls'].__name__} takes "
            f"{' and '.join(f'{f}=' for f in flags) or 'no fused= or foreach='}")}

    def model(self) -> nn.Module:
        """A fresh copy of the user's model each call: rebuilt from its recipe, or its shipped
        bytes loaded again; every trial starts from the same weights, frozen parameters and
        adapters included."""
        if "model_recipe" in self.shipped:
            built = self.shipped.fresh("model_recipe").build()
        else:
            built = self.shipped.fresh("model")
        if not isinstance(built, nn.Module):
            raise WorkloadError(f"the Trainer's model is a {type(built).__name__}, not a torch "
                                "nn.Module.")
        return built

    def describe(self) -> str:
        return f"hf Trainer: {self.model_path} on {self.dataset_path}"


#: TrainingArguments fields that decide the step's arithmetic (not searched, kept as given).
_STEP_FIELDS = ["learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                "max_grad_norm", "optim_args", "optim_target_modules", "warmup_steps"]
#: TrainingArguments fields autotune searches (the export writes these).
_SPEED_FIELDS = ["per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16",
                 "tf32", "torch_compile", "torch_compile_mode", "dataloader_num_workers",
                 "dataloader_pin_memory", "dataloader_prefetch_factor",
                 "dataloader_persistent_workers", "optim", "accelerator_config"]
#: The same settings under the names of other transformers versions: the first that the
#: installed TrainingArguments has is read and written (5.x renamed them).
_CHECKPOINTING_FIELDS = ("activation_checkpointing", "gradient_checkpointing")
_GROUPING_FIELDS = ("train_sampling_strategy", "group_by_length")
#: The user's checkpointing arguments (use_reentrant: the checkpoint_reentrant knob).
_CHECKPOINTING_KWARGS = tuple(f"{n}_kwargs" for n in _CHECKPOINTING_FIELDS)
#: Liger's kernels (the liger_kernel knob), a field of transformers 4.45 and later.
_LIGER_FIELD = "use_liger_kernel"
_VERSIONED = [*_CHECKPOINTING_FIELDS, *_CHECKPOINTING_KWARGS, *_GROUPING_FIELDS, _LIGER_FIELD]
#: The user's DDP fields: the baseline's DDP knobs and the trials' find_unused_parameters
#: (adapters/ddp.py); written back under launch.nproc_per_node.
_DDP_FIELDS = ["ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
               "ddp_static_graph"]


def version_field(names: tuple[str, ...]) -> str | None:
    fields = training_argument_fields()
    return next((n for n in names if n in fields), None)


def _reentrant(a: Mapping[str, Any]) -> bool:
    """The user's ``use_reentrant`` (their checkpointing kwargs'; none given: transformers
    5.x's default, non-reentrant)."""
    given = next((a[n] for n in _CHECKPOINTING_KWARGS if a.get(n)), None) or {}
    return bool(given.get("use_reentrant", False)) if isinstance(given, Mapping) else False


def _grouped(a: Mapping[str, Any]) -> bool:
    return a.get("train_sampling_strategy") == "group_by_length" or bool(a.get("group_by_length"))


def _collator(path: str | None, args: Mapping[str, Any] | None) -> Callable[[list[Any]], Any]:
    """A collator class is instantiated (with ``collator_args``); a function is used as it is
    unless ``collator_args`` are given (then it is a factory)."""
    if path is None:
        from transformers import default_data_collator

        return default_data_collator
    target = resolve_target(path)
    if isinstance(target, type) or args:
        return load_object(path, args, "collator")
    return target  # type: ignore[no-any-return]


def _defaults(a: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline's knobs from the user's TrainingArguments fields, and its gradient
    accumulation (``grad_accum``: the global batch per rank is per_device_train_batch_size x
    gradient_accumulation_steps, core/global_batch.py). Under ranks the Trainer's accelerate
    skips the all-reduce on an accumulation cycle's micro-batches but its last unless the
    user's ``accelerator_config`` sets ``sync_each_batch``: the baseline's
    ``accumulation_no_sync`` (adapters/ddp.py)."""
    workers = int(a["dataloader_num_workers"] or 0)
    accel = a["accelerator_config"] or {}
    compile_on = bool(a["torch_compile"] or a["torch_compile_mode"])
    accum = int(a.get("gradient_accumulation_steps") or 1)
    out: dict[str, Any] = {
        "batch_size": int(a["per_device_train_batch_size"]),
        "grad_accum": accum,
        "accumulation_no_sync": accum > 1 and not syncs_each_batch(accel),
        "num_workers": workers,
        "pin_memory": bool(a["dataloader_pin_memory"]),
        "amp": "bf16" if a["bf16"] else "fp16" if a["fp16"] else "off",
        "tf32": bool(a["tf32"]),
        "compile": (a["torch_compile_mode"] or "default") if compile_on else "off",
        **optimizer_defaults(str(getattr(a["optim"], "value", a["optim"]))),
        "liger_kernel": bool(a.get("use_liger_kernel")),
        "non_blocking": bool(accel.get("non_blocking", False)) if isinstance(accel, Mapping) else False,
        "activation_checkpointing": any(bool(a.get(n)) for n in _CHECKPOINTING_FIELDS),
        "checkpoint_reentrant": _reentrant(a),
        "length_grouping": _grouped(a),
        **user_ddp_defaults(a),
    }
    if workers > 0:
        out["prefetch_factor"] = int(a["dataloader_prefetch_factor"] or 2)
        out["persistent_workers"] = bool(a["dataloader_persistent_workers"])
    return out


def training_arguments_kwargs(best: Any) -> dict[str, Any]:
    """``TrainingArguments(output_dir=..., **training_arguments_kwargs(best))``: the exported
    configuration as TrainingArguments fields (checked against transformers 5.23's)."""
    doc = best_document(best)
    k = doc["knobs"]
    workers = int(k["num_workers"])
    compile_on = k["compile"] != "off"
    out: dict[str, Any] = {
        "per_device_train_batch_size": int(k["batch_size"]),
        # The study's accumulation (best.yaml's grad_accum); a best.yaml written before it
        # was carried has none: the Trainer's own is kept then (hf.tuned_arguments).
        **({"gradient_accumulation_steps": accumulation(doc)} if "grad_accum" in doc else {}),
        "bf16": k["amp"] == "bf16",
        "fp16": k["amp"] == "fp16",
        # Explicit either way: with torch_compile and tf32 unset the Trainer turns TF32 on.
        "tf32": bool(k["tf32"]),
        "torch_compile": compile_on,
        "torch_compile_mode": k["compile"] if compile_on else None,
        "dataloader_num_workers": workers,
        "dataloader_pin_memory": bool(k["pin_memory"]),
        "dataloader_prefetch_factor": int(k["prefetch_factor"] or 2) if workers else None,
        "dataloader_persistent_workers": bool(k["persistent_workers"]) if workers else False,
        # The user's own, or its form the search chose; none for the Trainer's own optimizer
        # instance (optimizer null: Trainer(optimizers=...)), which the Trainer steps instead.
        **({} if "optimizer" in k and k["optimizer"] is None else {"optim": trainer_optim(k)}),
        "accelerator_config": {"non_blocking": bool(k["non_blocking"])},
    }
    # Ranks that accumulate: sync_each_batch as the trials communicated (accumulation_no_sync).
    synced = gradient_accumulation_kwargs(doc)
    if synced:
        out["accelerator_config"]["gradient_accumulation_kwargs"] = synced
    checkpointing = version_field(_CHECKPOINTING_FIELDS)
    if checkpointing and "activation_checkpointing" in k:
        out[checkpointing] = bool(k["activation_checkpointing"])
        if k["activation_checkpointing"]:  # the user's use_reentrant, or the one searched
            out[f"{checkpointing}_kwargs"] = {
                "use_reentrant": bool(k.get("checkpoint_reentrant", False))}
    if "liger_kernel" in k and _LIGER_FIELD in training_argument_fields():
        out[_LIGER_FIELD] = bool(k["liger_kernel"])
    grouping = version_field(_GROUPING_FIELDS)
    if grouping and "length_grouping" in k:
        out[grouping] = (("group_by_length" if k["length_grouping"] else "random")
                         if grouping == "train_sampling_strategy" else bool(k["length_grouping"]))
    # Under launch.nproc_per_node: the measured DDP arguments (per_device_train_batch_size and
    # dataloader_num_workers above are per rank, as the trials ran them).
    out.update(training_arguments_ddp(doc, training_argument_fields()))
    # Sharded (FSDP2): fsdp and fsdp_config; FSDP's own activation checkpointing then.
    sharded = training_arguments_fsdp(doc, training_argument_fields())
    if sharded:
        out.update(sharded)
        if checkpointing:
            out[checkpointing] = False
            out.pop(f"{checkpointing}_kwargs", None)
    if (doc.get("device") or {}).get("type") == "cpu":
        out["use_cpu"] = True  # measured on the CPU: keep the Trainer off any GPU present
    return out


def model_traits(cls: Any, config: Any) -> dict[str, Any]:
    """What the transformer knobs need to know of a model: the attention implementations its
    class supports, its attention dropout and current implementation, whether it can
    checkpoint activations, whether it packs sequences, its model_type (which Liger kernels
    apply: core/llm_domains.liger_kernel); class attributes and its config: nothing is built."""
    supports = {"eager": True, "sdpa": getattr(cls, "_supports_sdpa", False),
                "flash_attention_2": getattr(cls, "_supports_flash_attn", False)}
    is_hf = hasattr(cls, "set_attn_implementation")
    choices = tuple(i for i in sequences.HF_IMPLEMENTATIONS if is_hf and supports[i])
    return {"attention_choices": choices,
            "attention_dropout": sequences.attention_dropout(config) if config is not None else 0.0,
            "attention_now": getattr(config, "_attn_implementation", None) or (
                "sdpa" if "sdpa" in choices else "eager"),
            "checkpointable": bool(getattr(cls, "supports_gradient_checkpointing", False)),
            "packs_sequences": is_hf and sequences.packed_sequences_supported(),
            "model_type": getattr(config, "model_type", None) if is_hf else None}


def model_settings(best: Any) -> dict[str, Any]:
    """What the exported configuration sets on the model and around it, where no
    TrainingArguments field holds it (``hf.apply`` sets all of it on a live Trainer): the
    ``attn_implementation`` to build the model with (``from_pretrained(...,
    attn_implementation=...)``), SDPA's backend (``torch.nn.attention.sdpa_kernel`` around the
    training step, backward included: a checkpointed layer recomputes its forward there), and
    for padding-free packing the collator and ``use_cache=False``."""
    k = best_document(best)["knobs"]
    out: dict[str, Any] = {}
    attention = k.get("attention")
    if attention not in (None, "default"):
        out["attn_implementation"] = sequences.implementation(str(attention))
        if attention in sequences.SDPA_BACKENDS:
            out["sdpa_backend"] = sequences.SDPA_BACKENDS[str(attention)]
    if k.get("padding_free"):
        out["data_collator"] = ("transformers.DataCollatorWithFlattening(return_position_ids="
                                "True, separator_id=-100)")
        out["use_cache"] = False
    return out
