"""Applying the knobs of transformer training: the attention implementation (and SDPA's backend),
activation checkpointing, length grouping and padding-free packing. ``core/training.py`` calls
these for trials and the runtime API; the Hugging Face adapter's ``apply`` calls them on a live
Trainer's model and collator.

Transformers is not imported at module level: ``autotune`` runs without it, and only a workload
whose batches are token sequences gets these knobs (their domains: ``core/domains.py``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib.util
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

#: The ``attention`` knob's values that pin one SDPA backend, and torch's name for it.
SDPA_BACKENDS = {"sdpa_math": "MATH", "sdpa_flash": "FLASH_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}
#: Attention implementations a Hugging Face model's config can be set to.
HF_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2")


def implementation(value: str) -> str:
    """The model-level implementation an ``attention`` value runs: every ``sdpa_*`` is SDPA
    with one backend pinned around the forward and backward."""
    return "sdpa" if value in SDPA_BACKENDS else value


@contextlib.contextmanager
def attention_backend(knobs: Mapping[str, Any]) -> Iterator[None]:
    """SDPA restricted to the knob's backend (no config field holds it: it is a context around
    the forward and the backward). Backward runs the kernels autograd recorded, but a
    checkpointed layer runs its forward again in backward: outside the context it chose another
    backend, and torch.utils.checkpoint refused the recomputed tensors (the gpt workload with
    ``attention=sdpa_math activation_checkpointing=True`` crashed every step, 2026-11-27)."""
    name = SDPA_BACKENDS.get(str(knobs.get("attention")))
    if name is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, name)]):
        yield


def sdpa_backends(device: str) -> list[str]:
    """The SDPA backends that can run on this device type with this torch: on a CPU, math and
    flash (torch has no CPU memory-efficient or cuDNN kernel)."""
    if device != "cuda":
        return ["sdpa_math", "sdpa_flash"]
    out = ["sdpa_math"]
    if torch.backends.cuda.is_flash_attention_available():
        out.append("sdpa_flash")
    out.append("sdpa_efficient")
    if hasattr(torch.backends.cuda, "is_cudnn_attention_available") and \
            torch.backends.cuda.is_cudnn_attention_available():
        out.append("sdpa_cudnn")
    return out


def flash_attention_2_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def attention_dropout(config: Any) -> float:
    """The attention dropout a transformers config sets (its name varies by model family)."""
    names = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "attn_dropout")
    return max([float(getattr(config, n, 0.0) or 0.0) for n in names] or [0.0])


def set_attention(model: nn.Module, knobs: Mapping[str, Any]) -> None:
    """A Hugging Face model switched to the knob's implementation (its config field,
    ``attn_implementation``); a plain model keeps its own attention code (only the SDPA backend
    applies to it, around the forward and backward)."""
    value = knobs.get("attention")
    if value in (None, "default"):
        return
    impl = implementation(str(value))
    setter = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    if setter is None or config is None or getattr(config, "_attn_implementation", None) == impl:
        return
    setter(impl)


def model_checkpointing(model: nn.Module) -> dict[str, Any] | None:
    """The activation checkpointing switched on on a Hugging Face model itself (PEFT's
    ``prepare_model_for_kbit_training``, a user's ``gradient_checkpointing_enable()``): its
    ``use_reentrant`` where the model keeps it, or None where it is off. The Trainer's
    arguments may not say it: a QLoRA run checkpoints with ``gradient_checkpointing=False``."""
    on = getattr(model, "is_activation_checkpointing", None)
    if on is None:
        on = getattr(model, "is_gradient_checkpointing", False)  # transformers 4.x
    if not on:
        return None
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if isinstance(func, functools.partial):
            return {"use_reentrant": bool(func.keywords.get("use_reentrant", True))}
    return {}


def enable_checkpointing(model: nn.Module, knobs: Mapping[str, Any],
                         layers: Sequence[type] = ()) -> None:
    """Activation checkpointing, non-reentrant unless the ``checkpoint_reentrant`` knob says
    reentrant: a Hugging Face model through its own switch (its decoder layers), a plain model
    by wrapping every module of the workload's ``checkpoint_layers`` types (torch's
    ``apply_activation_checkpointing``)."""
    wanted = knobs.get("activation_checkpointing")
    if wanted is None:  # left to the caller (hf.apply: the Trainer's own field switches it on)
        return
    if not wanted:  # off is the faster side: a model that came checkpointing is switched off
        if model_checkpointing(model) is not None:
            disable: Any = (getattr(model, "activation_checkpointing_disable", None)
                            or getattr(model, "gradient_checkpointing_disable", None))
            if disable is not None:
                disable()
        return
    reentrant = bool(knobs.get("checkpoint_reentrant", False))
    if getattr(model, "supports_gradient_checkpointing", False):
        kwargs = {"use_reentrant": reentrant}
        enable: Any = getattr(model, "activation_checkpointing_enable", None)  # transformers 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs)
            return
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if enable is not None:
            enable(gradient_checkpointing_kwargs=kwargs)
            return
    if not layers:
        raise ValueError("activation_checkpointing=True: the model is not a Hugging Face model "
                         "and the workload names no checkpoint_layers to wrap.")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    impl = CheckpointImpl.REENTRANT if reentrant else CheckpointImpl.NO_REENTRANT
    wrapper = functools.partial(checkpoint_wrapper, checkpoint_impl=impl)
    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper,
                                   check_fn=lambda m: isinstance(m, tuple(layers)))


def prepare_model(model: nn.Module, knobs: Mapping[str, Any], layers: Sequence[type] = ()) -> None:
    """Every model-level knob of this module, in place. Packed batches need the model's cache
    off: transformers 5.24 detects packed sequences from ``position_ids`` only without a cache,
    and a causal LM's config turns the cache on by default even in training, so samples would
    attend across their boundaries (measured: logits 0.54 apart from the padded batch's)."""
    set_attention(model, knobs)
    enable_checkpointing(model, knobs, layers)
    config: Any = getattr(model, "config", None)
    if knobs.get("padding_free") and getattr(config, "use_cache", None):
        config.use_cache = False


def packed_sequences_supported() -> bool:
    """The installed transformers builds a block-diagonal causal mask from a packed batch's
    ``position_ids`` (masking_utils, from 4.53): eager, SDPA and flash attention then keep each
    sample to itself."""
    try:
        from transformers import masking_utils
    except ImportError:
        return False
    return hasattr(masking_utils, "find_packed_sequence_indices")


def unwrapped(collate: Any) -> Any:
    """The user's collator inside the Trainer's column-removing wrapper (a Trainer over a torch
    Dataset wraps its data_collator in ``RemoveColumnsCollator``)."""
    if type(collate).__name__ == "RemoveColumnsCollator":
        return collate.data_collator
    return collate


def rewrapped(collate: Any, inner: Any) -> Any:
    """``inner`` in place of the user's collator, inside the same wrapper if there was one."""
    if inner is unwrapped(collate):
        return collate
    if type(collate).__name__ != "RemoveColumnsCollator":
        return inner
    outer = copy.copy(collate)
    outer.data_collator = inner
    return outer


def packing_collator(collate: Any) -> Any:
    """The padding-free collator for a padding one: ``DataCollatorWithFlattening`` concatenates
    the batch's samples into one row with ``position_ids`` restarting per sample and the first
    label of each sample ignored, so no padding token is computed."""
    from transformers import DataCollatorWithFlattening

    return rewrapped(collate, DataCollatorWithFlattening(return_position_ids=True,
                                                         separator_id=-100))


def switches_packing(collate: Any) -> bool:
    """A collator that packs by a ``padding_free`` field of its own (TRL's SFT collator, a
    dataclass): the knob sets that field rather than replacing the collator."""
    inner = unwrapped(collate)
    return dataclasses.is_dataclass(inner) and isinstance(getattr(inner, "padding_free", None),
                                                          bool)


def packs(collate: Any) -> bool:
    """The collator already packs each batch (padding-free)."""
    inner = unwrapped(collate)
    return type(inner).__name__ == "DataCollatorWithFlattening" or (
        switches_packing(inner) and bool(inner.padding_free))


def collator(collate: Any, knobs: Mapping[str, Any]) -> Any:
    """The collator ``knobs["padding_free"]`` asks for: a collator with a ``padding_free``
    field of its own gets it set (either way), a padding one is replaced when it is on."""
    if switches_packing(collate) and "padding_free" in knobs:
        inner = unwrapped(collate)
        if bool(knobs["padding_free"]) != inner.padding_free:
            return rewrapped(collate, dataclasses.replace(inner,
                                                          padding_free=bool(knobs["padding_free"])))
        return collate
    return packing_collator(collate) if knobs.get("padding_free") else collate


def sample_lengths(dataset: Any, key: str = "input_ids") -> list[int] | None:
    """Each sample's token count, for grouping by length: None when the samples are not
    Mappings holding ``key`` (the Trainer's ``model_input_name``)."""
    lengths = []
    for i in range(len(dataset)):
        item = dataset[i]
        if not isinstance(item, Mapping) or key not in item:
            return None
        lengths.append(len(item[key]))
    return lengths


def grouped_sampler(dataset: Any, batch_size: int, seed: int,
                    lengths: list[int] | None = None) -> Any:
    """The Trainer's own ``LengthGroupedSampler`` (what ``group_by_length`` runs in production):
    random mega-batches of 50 batches, each sorted by length, the longest mega-batch first."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    generator = torch.Generator().manual_seed(seed)
    return LengthGroupedSampler(batch_size, dataset=dataset, lengths=lengths,
                                generator=generator)
