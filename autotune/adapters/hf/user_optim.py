"""The Trainer's own optimizer instance (``Trainer(optimizers=(opt, scheduler))``) in the trials:
measured as that class with its hyper-parameters, over the same parameters.

The Trainer steps an optimizer it was given and ignores ``TrainingArguments.optim``, so a study
that built ``args.optim`` (AdamW by default) would measure, advise for (the learning-rate rule
of AdamW's family) and export another optimizer than the user's. An instance cannot travel as
it is (it holds the user's parameters), so it travels as what rebuilds it: its class, its
defaults and each parameter group's hyper-parameters with its parameters by name in the model.
A trial builds that class over its own model's parameters of those names; the implementation
flags (``fused=``/``foreach=``) are the ``optimizer_impl`` knob's, searched within what the
class takes. ``apply`` keeps the instance and sets the measured flags on it in place
(core/optimizer_impl.apply_optimizer_impl). The scheduler is not part of the step's cost and is
not sent. An optimizer over tensors the model does not hold cannot be rebuilt: refused, said.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from autotune.core.optimizer_impl import apply_optimizer_impl
from autotune.core.workload import WorkloadError

#: Constructor flags that are the optimizer_impl knob's, not the user's hyper-parameters.
IMPL_FLAGS = ("fused", "foreach")


def describe(opt: torch.optim.Optimizer, model: nn.Module) -> dict[str, Any]:
    """What rebuilds ``opt`` over a copy of ``model``: ``{"cls", "defaults", "groups",
    "impl"}``, each group its hyper-parameters and ``names`` (its parameters' names in
    ``model``). Raises WorkloadError where a parameter is not one of the model's."""
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    groups = []
    for group in opt.param_groups:
        missing = [tuple(p.shape) for p in group["params"] if id(p) not in names]
        if missing:
            raise WorkloadError(
                f"the Trainer's optimizer ({type(opt).__name__}) holds {len(missing)} tensor(s) "
                f"that are not parameters of its model (shapes {missing[:3]}): the trials "
                "rebuild it over their own copy of the model by parameter name, so it cannot "
                "be measured. Build it over model.parameters() (or named groups of them), or "
                "let the Trainer build it from TrainingArguments.optim.")
        groups.append({**_hyper(group), "names": [names[id(p)] for p in group["params"]]})
    return {"cls": type(opt), "defaults": _hyper(opt.defaults), "groups": groups,
            "impl": next((f for f in IMPL_FLAGS if opt.defaults.get(f)), "default")}


def takes(cls: type) -> list[str]:
    """The implementation flags ``cls``'s constructor takes (``optimizer_impl``'s reach)."""
    return [f for f in IMPL_FLAGS if f in inspect.signature(cls).parameters]


def build(spec: Mapping[str, Any], model: nn.Module | None, params: Iterable[nn.Parameter] = (),
          **impl: Any) -> torch.optim.Optimizer:
    """The user's optimizer class over ``model``'s parameters of the recorded names, with its
    defaults and groups' hyper-parameters, and the knob's implementation flags; without a
    model, over ``params`` in one group (a domain's probe of the class)."""
    cls, defaults = spec["cls"], _accepted(spec["cls"], spec["defaults"])
    if model is None:
        return apply_optimizer_impl(cls(list(params), **defaults), **impl)
    named = dict(model.named_parameters(remove_duplicate=False))
    groups = []
    for group in spec["groups"]:
        absent = [n for n in group["names"] if n not in named]
        if absent:
            raise WorkloadError(
                f"the Trainer's optimizer names parameters this trial's model does not have "
                f"({', '.join(absent[:3])}): the model rebuilt here differs from the one the "
                "optimizer was built over.")
        hyper = {k: v for k, v in group.items() if k != "names"}
        groups.append({**hyper, "params": [named[n] for n in group["names"]]})
    return apply_optimizer_impl(cls(groups, **defaults), **impl)


def _accepted(cls: type, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults ``cls``'s constructor takes (all, where it takes ``**kwargs``): a class may
    keep options in ``defaults`` it was not given as arguments."""
    sig = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values()):
        return dict(defaults)
    return {k: v for k, v in defaults.items() if k in sig}


def _hyper(options: Mapping[str, Any]) -> dict[str, Any]:
    """An optimizer's (or group's) options without its parameters and implementation flags."""
    return {k: v for k, v in options.items() if k != "params" and k not in IMPL_FLAGS}
