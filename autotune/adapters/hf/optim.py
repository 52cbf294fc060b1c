"""``TrainingArguments.optim`` in the trials: the optimizer built exactly as the Hugging Face
Trainer builds it, for every ``optim`` value the installed transformers accepts.

The Trainer's own ``Trainer.get_optimizer_cls_and_kwargs(args, model)`` picks the class and
its arguments (so Adafactor, SGD, schedule-free, GaLore, bitsandbytes' forms... are what the
user's run gets, arguments included), over the Trainer's parameter groups (weight decay on
``Trainer.get_decay_parameter_names``, none on biases and norms) and what its
``create_optimizer`` does around that (a handler's own ``params``/``model``/``optimizer_dict``,
bitsandbytes' 32-bit embeddings beside 8-bit states, a schedule-free optimizer put in train
mode). Its ``max_grad_norm`` is the workload's (``clip_norm``): the trial's ``Training`` clips
after GradScaler unscales the gradients, as the Trainer does through accelerate's
``clip_grad_norm_``, never in a pre-step hook, which a fused optimizer's own unscaling would
follow (the hook would read the scaled norm).

The study varies only implementations of the user's update (the registry's ``optimizer`` and
``optimizer_impl`` knobs, core/llm_domains.py): torch's AdamW plain or fused, and, where the
user lists them, bitsandbytes' 8-bit and paged forms of the same optimizer (their numerics
differ). Any other ``optim`` is kept as it is. One a trial cannot build (a package missing, a
CUDA-only optimizer on the CPU) fails that trial, naming it; the study goes on.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch
from torch import nn

from autotune.core.llm_domains import TORCH_ADAMW
from autotune.core.workload import WorkloadError

#: TrainingArguments.optim values of torch's AdamW and the optimizer_impl knob they are.
OPTIM_IMPL = {"adamw_torch": "default", "adamw_torch_fused": "fused"}
IMPL_OPTIM = {"default": "adamw_torch", "fused": "adamw_torch_fused"}
#: The TrainingArguments fields the Trainer's optimizer reads (its handlers: learning rate,
#: Adam's betas and epsilon, the free-form ``optim_args``, GaLore's and APOLLO's target
#: modules, the schedule-free warm-up, the layer-wise optimizers' accumulation check).
OPTIMIZER_FIELDS = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                    "optim_args", "optim_target_modules", "warmup_steps",
                    "gradient_accumulation_steps")
#: Optimizers whose step the Trainer runs inside the backward (accelerate's
#: ``lomo_backward``): autotune's step calls ``loss.backward()`` and cannot.
_FUSED_BACKWARD = ("lomo", "adalomo")


@functools.cache
def accepted() -> tuple[str, ...]:
    """Every ``optim`` value of the installed transformers (its ``OptimizerNames``)."""
    from transformers.training_args import OptimizerNames

    return tuple(str(o.value) for o in OptimizerNames)


def checked(optim: Any) -> str:
    """The user's ``optim`` as its name; one the installed TrainingArguments does not accept is
    refused here, with the values it does."""
    name = str(getattr(optim, "value", optim))
    if name not in accepted():
        raise WorkloadError(
            f"training_args.optim={name!r} is not an optimizer of the installed transformers' "
            f"TrainingArguments; valid values: {', '.join(accepted())}.")
    return name


def optimizer_defaults(optim: str) -> dict[str, Any]:
    """The baseline's ``optimizer`` and ``optimizer_impl`` knobs for the user's ``optim``:
    torch's AdamW is ``adamw_torch`` with its implementation (default or fused) apart; any
    other value is the knob's value itself."""
    if optim in OPTIM_IMPL:
        return {"optimizer": TORCH_ADAMW, "optimizer_impl": OPTIM_IMPL[optim]}
    return {"optimizer": optim, "optimizer_impl": "default"}


def trainer_optim(knobs: Mapping[str, Any]) -> str:
    """The ``optim`` value a configuration's knobs are (what the export writes and the trial
    builds). A best.yaml written before the ``optimizer`` knob has torch's AdamW."""
    optimizer = knobs.get("optimizer") or TORCH_ADAMW
    if optimizer != TORCH_ADAMW:
        return str(optimizer)
    impl = knobs.get("optimizer_impl", "default")
    if impl not in IMPL_OPTIM:
        raise WorkloadError(f"optimizer_impl={impl}: TrainingArguments.optim offers torch's "
                            f"AdamW as {' and '.join(OPTIM_IMPL)} only.")
    return IMPL_OPTIM[impl]


def impl_name(impl: Mapping[str, Any]) -> str:
    """The optimizer_impl value of a ``Workload.optimizer`` hook's ``**impl`` flags."""
    return "fused" if impl.get("fused") else "foreach" if impl.get("foreach") else "default"


def training_arguments(fields: Mapping[str, Any], optim: str) -> Any:
    """A real TrainingArguments with the user's optimizer fields and ``optim``: what
    ``get_optimizer_cls_and_kwargs`` reads."""
    from transformers import TrainingArguments

    kept = {k: fields[k] for k in OPTIMIZER_FIELDS if fields.get(k) is not None}
    return TrainingArguments(output_dir=tempfile.gettempdir(), optim=optim, **kept)


def build(fields: Mapping[str, Any], optim: str, params: Iterable[nn.Parameter],
          model: nn.Module | None = None) -> torch.optim.Optimizer:
    """The Trainer's optimizer for ``optim`` over ``model`` (its ``create_optimizer``), or over
    ``params`` where no model is given (weight decay then on matrices only). Raises WorkloadError naming ``optim`` where it cannot be built here."""
    from transformers import Trainer
    from transformers.trainer_optimizer import is_optimizer_factory

    if optim in _FUSED_BACKWARD:
        raise WorkloadError(
            f"training_args.optim={optim}: the Trainer runs LOMO's update inside the backward "
            "(accelerate's lomo_backward, in place of loss.backward()); autotune's trial step "
            "calls loss.backward(), so it cannot measure this optimizer.")
    trained = [p for p in (model.parameters() if model is not None else params) if p.requires_grad]
    try:
        args = training_arguments(fields, optim)
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args, cast(Any, model))
        kwargs = dict(kwargs)
        if is_optimizer_factory(cls):
            opt = cls()(model, **kwargs)
        else:
            groups: Any = _groups(model, trained, float(fields.get("weight_decay") or 0.0))
            for key in ("params", "model", "optimizer_dict"):  # a handler's own, as the Trainer
                if key in kwargs:
                    groups = kwargs.pop(key)
            opt = cls(groups, **kwargs)
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the handler's or the class's own error, named
        raise WorkloadError(
            f"training_args.optim={optim}: transformers could not build it here "
            f"({type(exc).__name__}: {exc}). This trial fails; the study goes on.") from exc
    if model is not None and "bitsandbytes" in str(cls) and kwargs.get("optim_bits") == 8:
        _embeddings_in_32_bits(model)
    if callable(getattr(opt, "train", None)):
        opt.train()  # a schedule-free optimizer steps in train mode (Trainer.train sets it)
    return cast(torch.optim.Optimizer, opt)


def _groups(model: nn.Module | None, trained: list[nn.Parameter],
            weight_decay: float) -> list[dict[str, Any]]:
    """The Trainer's two parameter groups: weight decay on the parameters its
    ``get_decay_parameter_names`` names (not biases, not norms), none on the rest; frozen
    parameters left out. Without the model (a bare parameter list): decay on matrices."""
    if model is None:
        decay = {id(p) for p in trained if p.ndim >= 2}
    else:
        from transformers import Trainer

        names = set(Trainer.get_decay_parameter_names(cast(Any, None), model))
        decay = {id(p) for n, p in model.named_parameters() if n in names}
    groups = [{"params": [p for p in trained if id(p) in decay], "weight_decay": weight_decay},
              {"params": [p for p in trained if id(p) not in decay], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _embeddings_in_32_bits(model: nn.Module) -> None:
    """What the Trainer does for bitsandbytes' 8-bit states: embeddings keep 32-bit ones."""
    import bitsandbytes

    manager = bitsandbytes.optim.GlobalOptimManager.get_instance()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            manager.register_module_override(module, "weight", {"optim_bits": 32})


def clip_norm(fields: Mapping[str, Any]) -> float | None:
    """The Trainer's gradient clipping for these TrainingArguments fields: ``max_grad_norm``
    where it is above 0 (the Trainer clips only then), else None."""
    value = fields.get("max_grad_norm")
    return float(value) if value is not None and float(value) > 0 else None
