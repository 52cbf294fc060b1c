"""Applying Liger's kernels (the ``liger_kernel`` knob) to a Hugging Face model: fused RMSNorm,
RoPE, SwiGLU and cross-entropy as Triton kernels, patched into the model instance as the
Trainer patches it for ``use_liger_kernel=True`` (transformers' ``apply_liger_kernel``).
core/training.py calls it for trials and the runtime API; its domain is core/llm_domains.py's.

Neither liger-kernel nor transformers is imported at module level: autotune runs without them.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from torch import nn


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def liger_model_types() -> frozenset[str] | None:
    """The model types liger-kernel has kernels for (its own table); None: it cannot be read
    (another version's layout), so every type is offered and a trial says what fails."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except Exception:  # noqa: BLE001 - an import of a package that may be absent or moved
        return None
    return frozenset(MODEL_TYPE_TO_APPLY_LIGER_FN)


def apply_liger(model: nn.Module, knobs: Any) -> None:
    """Liger's kernels patched into ``model`` (a PreTrainedModel or a PEFT model around one)
    where the knob says so, in place, before it is placed on the device: what the Trainer does
    with ``use_liger_kernel=True`` (its default kernel config)."""
    if not knobs.get("liger_kernel"):
        return
    if not liger_installed():
        raise RuntimeError("liger_kernel=True: the liger-kernel package is not installed "
                           "(pip install liger-kernel).")
    from transformers.integrations.liger import apply_liger_kernel

    apply_liger_kernel(model, None)
