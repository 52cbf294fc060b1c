"""The adapters under torchrun (launch.nproc_per_node=N): what the Hugging Face
Trainer and Lightning's DDPStrategy do with DistributedDataParallel, mirrored in the trials,
and the study's DDP arguments handed back in each framework's own terms.

A trial of an adapter workload runs as N ranks like any workload (measure/ranks.py): each rank
wraps the model in DDP with the DDP knobs (core/distributed.wrap) and reads its part of the
data through a DistributedSampler, with the per-rank batch (``per_device_train_batch_size`` /
the DataLoader's ``batch_size``) and per-rank loader workers, as both frameworks have them.
What the frameworks add to DDP is here:

- The Hugging Face Trainer (transformers 5.24, ``Trainer._build_accelerator_args``, read
  there) passes ``find_unused_parameters=TrainingArguments.ddp_find_unused_parameters`` when
  set, else True, except for a ``PreTrainedModel`` with activation checkpointing on (False):
  DDP then walks the autograd graph after every forward, a real per-step cost. The trials run
  the same rule (``trainer_find_unused``); training_args.yaml states the value explicitly
  (``ddp_find_unused_parameters``), with ``ddp_bucket_cap_mb``, ``ddp_broadcast_buffers`` and
  ``ddp_static_graph``; ``hf.apply`` sets on the Accelerator's DDP arguments
  (``DistributedDataParallelKwargs``, accelerate 1.15) what no field holds:
  ``gradient_as_bucket_view``, the comm hook (``DDPCommunicationHookType``) and torch 2.14's
  ``batched_grad_copy``. With gradient accumulation, accelerate skips the all-reduce on a
  cycle's micro-batches but its last unless ``accelerator_config``'s
  ``gradient_accumulation_kwargs`` sets ``sync_each_batch``: the user's is the baseline's
  ``accumulation_no_sync``, and the export writes the measured one back there.
- Lightning's ``DDPStrategy(**kwargs)`` (lightning 2.6) passes its extra keyword arguments to
  DDP as they are (``_ddp_kwargs``) and registers ``ddp_comm_hook``; its default
  ``find_unused_parameters`` is DDP's (False), as in the trials. The export is
  ``strategy=DDPStrategy(...)`` with ``devices=N``.

Not mirrored: the Trainer's ``average_tokens_across_devices`` (an all-gather of one count per
optimizer step, to normalize a loss that takes ``num_items_in_batch``): the adapter's step
uses the model's mean loss, as on one process.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping
from typing import Any

from autotune.core.distributed import comm_hook, has_ddp_argument


def launched(doc: Mapping[str, Any]) -> bool:
    """Whether the study's trials ran as ranks (best.yaml has its ``launch`` section)."""
    return bool(doc.get("launch"))


def found_unused(doc: Mapping[str, Any]) -> bool:
    """The ``find_unused_parameters`` the best trial's ranks ran with (best.yaml ddp_kwargs)."""
    return bool((doc.get("ddp_kwargs") or {}).get("find_unused_parameters", False))


# --- Hugging Face --------------------------------------------------------------------------
def trainer_find_unused(model: Any, knobs: Mapping[str, Any], user_value: Any) -> bool:
    """``find_unused_parameters`` as the Trainer sets it for ``model`` under torchrun: the
    user's ``ddp_find_unused_parameters`` if set; else off for a PreTrainedModel that
    checkpoints activations (it breaks checkpointing), on for any other model."""
    if user_value is not None:
        return bool(user_value)
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        return True
    checkpointing = (model.is_activation_checkpointing
                     if hasattr(type(model), "is_activation_checkpointing")
                     else model.is_gradient_checkpointing)  # transformers 4.x's name
    return not (bool(checkpointing) or bool(knobs.get("activation_checkpointing")))


def training_arguments_ddp(doc: Mapping[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """TrainingArguments' DDP fields for a study launched as ranks (none otherwise), those the
    installed TrainingArguments has (``fields``). ``ddp_find_unused_parameters`` is explicit:
    left unset, the Trainer would turn it on where the trials ran without it."""
    k = doc["knobs"]
    if not launched(doc) or str(k.get("sharding") or "no_shard") != "no_shard":
        return {}  # a sharded study's ranks are FSDP2's (adapters/fsdp.py)
    out = {"ddp_bucket_cap_mb": int(k.get("bucket_cap_mb") or 25),
           "ddp_broadcast_buffers": bool(k.get("broadcast_buffers", True)),
           "ddp_static_graph": bool(k.get("static_graph", False)),
           "ddp_find_unused_parameters": found_unused(doc)}
    return {name: value for name, value in out.items() if name in fields}


def user_ddp_defaults(args: Mapping[str, Any]) -> dict[str, Any]:
    """The DDP knobs' baseline from the user's TrainingArguments fields (those set)."""
    pairs = {"ddp_bucket_cap_mb": "bucket_cap_mb", "ddp_static_graph": "static_graph",
             "ddp_broadcast_buffers": "broadcast_buffers"}
    return {knob: args[name] for name, knob in pairs.items() if args.get(name) is not None}


def syncs_each_batch(accelerator_config: Any) -> bool:
    """accelerate's ``sync_each_batch`` as the user set it (``accelerator_config``'s
    ``gradient_accumulation_kwargs``, a dict or transformers' AcceleratorConfig). Its default,
    False, is the Trainer's ``accelerator.no_sync`` on an accumulation cycle's micro-batches
    but its last (DDP's no_sync, FSDP2's set_requires_gradient_sync(False): transformers 5.24's
    training loop): the baseline's ``accumulation_no_sync`` is its opposite."""
    kwargs = (accelerator_config.get("gradient_accumulation_kwargs")
              if isinstance(accelerator_config, Mapping)
              else getattr(accelerator_config, "gradient_accumulation_kwargs", None))
    return bool((kwargs or {}).get("sync_each_batch", False))


def gradient_accumulation_kwargs(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``accelerator_config``'s ``gradient_accumulation_kwargs`` for a study whose ranks
    accumulated (best.yaml's launch and grad_accum > 1; {} otherwise: one process has nothing
    to synchronize, and without accumulation every micro-batch is a cycle's last):
    ``sync_each_batch`` is the opposite of the measured ``accumulation_no_sync``, so the
    Trainer communicates on the micro-batches the trials did."""
    if not launched(doc) or int(doc.get("grad_accum") or 1) <= 1:
        return {}
    return {"sync_each_batch": not bool(doc["knobs"].get("accumulation_no_sync", False))}


def merged_accelerator_config(own: Mapping[str, Any], tuned: Mapping[str, Any]) -> dict[str, Any]:
    """The user's ``accelerator_config`` (``own``, as a dict) with the tuned keys, their own
    ``gradient_accumulation_kwargs`` keys kept beside the tuned ``sync_each_batch``, less
    ``num_steps``: the Trainer moved it into ``gradient_accumulation_steps`` (the field the
    export writes) and set it to 1 in the user's dict, which with accumulation it then
    refuses when it builds its Accelerator again."""
    out = {**own, **tuned}
    kwargs = {**(own.get("gradient_accumulation_kwargs") or {}),
              **(tuned.get("gradient_accumulation_kwargs") or {})}
    kwargs.pop("num_steps", None)
    out["gradient_accumulation_kwargs"] = kwargs or None
    return out


@functools.cache
def _batched_grad_copy_kwargs() -> type:
    """accelerate's DDP arguments with torch 2.14's ``batched_grad_copy``, which accelerate
    has no field for: its ``to_kwargs`` passes every field that differs from the class's
    default to DistributedDataParallel, this one included."""
    from accelerate.utils import DistributedDataParallelKwargs

    @dataclasses.dataclass
    class BatchedGradCopyKwargs(DistributedDataParallelKwargs):
        batched_grad_copy: bool = False

    return BatchedGradCopyKwargs


def accelerator_ddp_kwargs(current: Any, doc: Mapping[str, Any]) -> Any:
    """The Accelerator's DDP arguments (``current``: the handler the Trainer built from its
    fields) with what no TrainingArguments field holds: ``gradient_as_bucket_view``, the comm
    hook, and ``batched_grad_copy`` where this torch has it."""
    from accelerate.utils import DDPCommunicationHookType, DistributedDataParallelKwargs

    k = doc["knobs"]
    values = ({f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
              if current is not None else {})
    values["gradient_as_bucket_view"] = bool(k.get("gradient_as_bucket_view", False))
    hook = k.get("comm_hook") or "none"
    values["comm_hook"] = {"fp16": DDPCommunicationHookType.FP16,
                           "bf16": DDPCommunicationHookType.BF16}.get(hook,
                                                                      DDPCommunicationHookType.NO)
    cls: type = DistributedDataParallelKwargs
    if has_ddp_argument("batched_grad_copy"):
        cls = _batched_grad_copy_kwargs()
        values["batched_grad_copy"] = bool(k.get("batched_grad_copy", False))
    else:
        values.pop("batched_grad_copy", None)
    return cls(**values)


# --- Lightning -----------------------------------------------------------------------------
def strategy_arguments(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``DDPStrategy``'s keyword arguments for DDP: best.yaml's ddp_kwargs (named for the
    measured torch; find_unused_parameters as the trials ran)."""
    return dict(doc.get("ddp_kwargs") or {})


def ddp_strategy(doc: Mapping[str, Any]) -> Any:
    """``lightning.pytorch.strategies.DDPStrategy`` with the measured DDP arguments and comm
    hook, for ``Trainer(strategy=..., devices=N)``."""
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(ddp_comm_hook=comm_hook(doc["knobs"].get("comm_hook")),
                       **strategy_arguments(doc))


def strategy_document(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """lightning.yaml's ``strategy``: the DDPStrategy to build, in plain terms (None for a
    study of one process)."""
    if not launched(doc):
        return None
    from autotune.core.distributed import COMM_HOOKS

    hook = doc["knobs"].get("comm_hook") or "none"
    return {"class": "lightning.pytorch.strategies.DDPStrategy",
            "kwargs": strategy_arguments(doc), "ddp_comm_hook": COMM_HOOKS.get(hook),
            "devices": int(doc["launch"]["nproc_per_node"])}
