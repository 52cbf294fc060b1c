"""The domains of the language-model fine-tuning knobs: the optimizer as a Hugging Face
``TrainingArguments.optim`` names it (its bitsandbytes forms of the same update) and Liger's
kernels. core/domains.py's counterpart for these knobs of the registry (core/knobs.py); applied
in adapters/hf/optim.py (the optimizer) and core/llm_kernels.py (Liger).

A workload states them as the Hugging Face adapter does: ``defaults["optimizer"]``, the user's
``optim`` (torch's AdamW as ``adamw_torch``, its implementation being ``optimizer_impl``; None,
the default: the workload builds its own optimizer), and a ``model_type`` attribute, its
model's ``config.model_type`` (None: not a Hugging Face model).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from autotune.core import domains, llm_kernels
from autotune.core.domains import Domain
from autotune.core.env import Env
from autotune.core.workload import Workload

#: The ``optimizer`` knob's name for torch's AdamW (optim adamw_torch and adamw_torch_fused:
#: which of the two is the ``optimizer_impl`` knob).
TORCH_ADAMW = "adamw_torch"
#: Optimizers with the same update in other forms: bitsandbytes' 32-bit, 8-bit (states
#: quantized block-wise to 8 bits) and paged (states in CUDA unified memory, paged out to the
#: host under memory pressure) ones, by TrainingArguments.optim's names.
SAME_UPDATE: tuple[tuple[str, ...], ...] = (
    (TORCH_ADAMW, "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit"),
    ("lion_32bit", "lion_8bit", "paged_lion_32bit", "paged_lion_8bit"),
    ("ademamix", "ademamix_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit"),
)


def same_update(optim: str) -> tuple[str, ...]:
    """The forms of ``optim``'s update (itself included); empty: it has no other form here."""
    return next((family for family in SAME_UPDATE if optim in family), ())


def bitsandbytes_installed() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def optimizer(env: Env, wl: Workload) -> Domain:
    """The user's optimizer, kept: searched over its bitsandbytes forms only where the user
    lists them (opt-in: 8-bit states change the numerics), which run on CUDA."""
    own = wl.defaults.get("optimizer")
    if own is None:
        return Domain([None], "the workload builds its own optimizer (Workload.optimizer); "
                      "the Hugging Face adapter's is its TrainingArguments.optim")
    forms = same_update(str(own))
    if not forms:
        return Domain([own], f"optim={own} is kept as it is: autotune varies only "
                      "implementations of one update (torch's AdamW plain or fused; "
                      "bitsandbytes' 8-bit and paged AdamW, Lion and AdEMAMix where listed)")
    if env.device != "cuda":
        return Domain([own], f"bitsandbytes' 8-bit and paged forms of {own} are CUDA kernels "
                      "(not on the CPU)")
    if not bitsandbytes_installed():
        return Domain([own], f"bitsandbytes is not installed: its 8-bit and paged forms of "
                      f"{own} are not offered (pip install bitsandbytes)")
    listed = ",".join(f for f in forms if f != "adamw_8bit")
    return Domain([own], "8-bit and paged optimizer states (bitsandbytes) change the numerics: "
                  f"list values to search them, e.g. knobs.optimizer=[{listed}]",
                  offers=forms)


def optimizer_impl(env: Env, wl: Workload) -> Domain:
    """torch's optimizer kernels (core/domains.optimizer_impl), where the optimizer is torch's
    AdamW or the workload's own; a named optimizer with no torch AdamW form keeps the
    implementation its optim names."""
    own = wl.defaults.get("optimizer")
    if own is not None and TORCH_ADAMW not in same_update(str(own)):
        return Domain(["default"], f"optim={own} has the one implementation its name says")
    return domains.optimizer_impl(env, wl)


def one_implementation(p: Mapping[str, Any]) -> str | None:
    """optimizer_impl chooses among torch's AdamW kernels (and a workload's own optimizer's);
    another named optimizer has the one implementation its optim names."""
    chosen = p.get("optimizer")
    if chosen in (None, TORCH_ADAMW):
        return None
    return f"optimizer={chosen} is built as TrainingArguments.optim names it"


def liger_kernel(env: Env, wl: Workload) -> Domain:
    """Liger's Triton kernels in a Hugging Face model (TrainingArguments.use_liger_kernel):
    searched on CUDA where liger-kernel is installed and has kernels for the model's type."""
    model_type = getattr(wl, "model_type", None)
    if model_type is None:
        return Domain([False], "Liger patches a Hugging Face model's modules; the workload's "
                      "model is not one")
    if env.device != "cuda":
        return Domain([False], "Liger's kernels are Triton kernels for CUDA GPUs (not on the CPU)")
    if not llm_kernels.liger_installed():
        return Domain([False], "the liger-kernel package is not installed (pip install "
                      "liger-kernel)")
    supported = llm_kernels.liger_model_types()
    if supported is not None and model_type not in supported:
        return Domain([False], f"liger-kernel has no kernels for model_type {model_type}")
    return Domain([False, True])


def checkpoint_reentrant(env: Env, wl: Workload) -> Domain:
    """The user's checkpointing implementation (use_reentrant), kept unless both are listed."""
    if not (wl.checkpointable or wl.checkpoint_layers):
        return Domain([False], "the workload's model has no checkpointing switch (a Hugging "
                      "Face model that supports it, or Workload.checkpoint_layers)")
    own = bool(wl.defaults.get("checkpoint_reentrant", False))
    return Domain([own], "reentrant and non-reentrant checkpointing recompute the same "
                  "activations; yours is kept: list values to search both, "
                  "knobs.checkpoint_reentrant=[false,true]", offers=(False, True))


def not_checkpointing(p: Mapping[str, Any]) -> str | None:
    return None if p.get("activation_checkpointing") else "activation checkpointing is off"
