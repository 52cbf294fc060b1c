"""The optimizer's implementation knobs on an optimizer the user or a framework built:
``optimizer_impl`` (torch's default, ``foreach=``, ``fused=``) and the ``optimizer`` knob's
name for a workload's hook. Shared by the trials (core/training.py), ``autotune.Runtime`` and
the adapters, which meet optimizers already built by ``configure_optimizers`` or a Trainer."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch


def optimizer_kwargs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer constructor's implementation flags (foreach= / fused=); {} = torch's
    default choice."""
    impl = knobs["optimizer_impl"]
    return {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}


def named_optimizer(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``optimizer`` knob as a workload's optimizer hook takes it (``optim=``: a Hugging
    Face TrainingArguments.optim, built by the adapter); {} where the workload builds its own
    (the knob is null)."""
    name = knobs.get("optimizer")
    return {} if name is None else {"optim": str(name)}


def set_optimizer_impl(opt: torch.optim.Optimizer,
                       knobs: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The knobs' optimizer_impl applied to an optimizer already built (a framework's
    ``configure_optimizers``): ``apply_optimizer_impl`` with the knob's flags."""
    return apply_optimizer_impl(opt, **optimizer_kwargs(knobs))


def apply_optimizer_impl(opt: torch.optim.Optimizer, **impl: Any) -> torch.optim.Optimizer:
    """``fused=True`` / ``foreach=True`` (a ``Workload.optimizer`` hook's ``**impl``, or
    ``Runtime.optimizer_kwargs()``) applied to an optimizer already built, such as one a
    model's ``configure_optimizers`` builds with parameter groups, in place and before its
    first step, so that the LR schedulers built on it stay attached. torch gives every group
    its own ``fused``/``foreach`` key at construction, and a group's key overrides the
    defaults, so each group is set, then the defaults: what the constructor argument would
    have set (a fused optimizer also handles GradScaler's unscaling itself). torch reads the
    flags at each step and checks the parameters' device and dtype at the first. No flag
    (``{}``, optimizer_impl=default): the optimizer as it was built, as the trials' was."""
    unknown = sorted(set(impl) - {"fused", "foreach"})
    if unknown or sum(bool(v) for v in impl.values()) > 1:
        raise ValueError(f"apply_optimizer_impl({', '.join(f'{k}={v!r}' for k, v in impl.items())})"
                         ": expected at most one of fused=True or foreach=True (a Workload."
                         "optimizer hook's **impl, as autotune passes it).")
    flag = next((k for k, v in impl.items() if v), None)
    if flag is None:
        return opt
    name = type(opt).__name__
    takes = [f for f in ("fused", "foreach")
             if f in inspect.signature(type(opt).__init__).parameters]
    if flag not in takes:
        offered = " or ".join(f"{f}=" for f in takes) or "neither fused= nor foreach="
        raise ValueError(f"optimizer_impl={flag}: {name} takes no {flag}= argument, so it cannot "
                         f"apply ({name} takes {offered}). The study measured another optimizer "
                         f"class than this one; or narrow the study to what {name} takes: "
                         f"knobs.optimizer_impl=[{','.join(['default', *takes])}].")
    if opt.state:
        raise ValueError(f"optimizer_impl={flag}: {name} has already stepped; set it before "
                         "the first step.")
    other = "foreach" if flag == "fused" else "fused"
    for group in [*opt.param_groups, opt.defaults]:
        if flag == "fused" and group.get("differentiable"):
            raise ValueError(f"{name}(differentiable=True) cannot be fused.")
        group[flag] = True
        if other in group:
            group[other] = None
    if flag == "fused":
        opt._step_supports_amp_scaling = True  # type: ignore[attr-defined]  # as the constructor sets it
    return opt
