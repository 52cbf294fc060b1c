"""An already compiled model's torch.compile mode, read back: ``Runtime.model`` keeps a model
the user compiled and warns where its mode is not the measured one."""

from __future__ import annotations

from typing import Any

import torch


def compiled(model: Any) -> bool:
    """Whether ``model`` is already ``torch.compile``'s wrapper."""
    return isinstance(model, torch._dynamo.eval_frame.OptimizedModule)


#: torch.compile's modes, as the ``compile`` knob names them.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compiled_mode(model: Any) -> str | None:
    """The torch.compile mode of an already compiled model, or None where it cannot be told.

    torch 2.14's ``OptimizedModule`` keeps no mode attribute: the mode survives only as the
    inductor options it set (``torch._inductor.list_mode_options``) on the backend wrapper
    the module's dynamo context holds. The mode is the one whose options are all there (the
    most specific such); another backend than inductor, or private attributes that moved in
    another torch version, give None."""
    try:
        from torch._inductor import list_mode_options

        backend = model.dynamo_ctx.callback._torchdynamo_orig_backend._torchdynamo_orig_backend
        wrapper: Any = getattr(backend, "__wrapped__", None)
        if type(wrapper).__name__ != "_TorchCompileInductorWrapper":
            return None
        config = dict(wrapper.config)
        dynamic = getattr(wrapper, "dynamic", None)
        fits = [m for m in COMPILE_MODES
                if all(config.get(k) == v for k, v in list_mode_options(m, dynamic).items())]
    except Exception:  # noqa: BLE001 - private torch internals: unknown rather than wrong
        return None
    return max(fits, key=lambda m: len(list_mode_options(m, dynamic))) if fits else None
