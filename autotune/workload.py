"""The Workload protocol: what a user implements so autotune can train their model.

A workload owns what must not change while tuning (data, model, loss, optimizer family);
autotune owns how it is fed and executed (the knobs). Implement a subclass of ``Workload``,
expose a factory, and run ``autotune workload._target_=my_pkg.my_module.MyWorkload``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset


class WorkloadError(ValueError):
    """A workload could not be loaded or built; the message names what is wrong."""


class Workload:
    """Base class for a trainable workload.

    Batches are ``(inputs, targets)`` pairs of tensors (or anything ``default_collate`` makes).
    If the input transform can be split (e.g. decode on the host, normalize on the device), set
    ``splits_transform = True``: ``dataset("uint8")`` then yields raw uint8 inputs and
    ``device_transform`` finishes them on the device, so a 4x smaller batch crosses the bus.
    """

    name: str = "workload"
    #: Knob values of the user's current setup: trial 0 (the baseline) runs exactly these.
    defaults: dict[str, Any] = {}
    splits_transform: bool = False
    #: 4-D image inputs, so channels_last can apply.
    image_inputs: bool = False
    #: Every batch has the same shapes (the loader drops the last partial batch), so CUDA Graphs
    #: and compile's reduce-overhead can replay one captured step.
    static_shapes: bool = True

    def dataset(self, transfer_dtype: str) -> Dataset:
        raise NotImplementedError

    def device_transform(self, inputs: torch.Tensor) -> torch.Tensor:
        """Finish on the device what ``dataset("uint8")`` left undone. Default: nothing."""
        return inputs

    def model(self) -> nn.Module:
        raise NotImplementedError

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        raise NotImplementedError

    def optimizer(self, params: Iterable[nn.Parameter], **impl: Any) -> torch.optim.Optimizer:
        """Build the optimizer; pass ``**impl`` on (it carries foreach= / fused=)."""
        raise NotImplementedError

    def cpu_sized(self) -> Workload:
        """A smaller copy for CPU runs when the user set no sizes. Default: unchanged."""
        return self

    def describe(self) -> str:
        return self.name


def resolve_target(target: str) -> Any:
    """Import ``package.module.attr``; raise WorkloadError naming what failed."""
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise WorkloadError(
            f"workload._target_={target!r} is not a dotted path; expected "
            "'package.module.Factory', e.g. 'workloads.resnet18.ResNet18Workload'."
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise WorkloadError(
            f"workload._target_={target!r}: importing module {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}. Check that the package is installed or on PYTHONPATH."
        ) from exc
    if not hasattr(module, attr):
        public = sorted(n for n in dir(module) if not n.startswith("_"))
        raise WorkloadError(
            f"workload._target_={target!r}: module {module_name!r} has no attribute {attr!r}. "
            f"It defines: {', '.join(public) or 'nothing public'}."
        )
    return getattr(module, attr)


def build_workload(spec: dict[str, Any]) -> Workload:
    """Instantiate a workload from its config node (``_target_`` + keyword arguments).

    Done by hand rather than with ``hydra.utils.instantiate`` so that a wrong argument name is
    reported with the factory's real parameter list instead of a nested Hydra traceback.
    """
    spec = dict(spec)
    target = spec.pop("_target_", None)
    if not target:
        raise WorkloadError(
            "The workload config has no _target_. Pick a shipped one (workload=mlp, "
            "workload=resnet18, workload=gpt) or set workload._target_=package.module.Factory."
        )
    factory = resolve_target(str(target))
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        valid = [n for n in sig.parameters if n != "self"]
        unknown = [k for k in spec if k not in valid]
        if unknown and not accepts_any:
            raise WorkloadError(
                f"workload {target}: unknown argument(s) {', '.join(unknown)}. "
                f"Valid arguments: {', '.join(valid) or 'none'}."
            )
    try:
        workload = factory(**spec)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(
            f"workload {target} raised while being built: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {target} returned {type(workload).__name__}, not an "
            "autotune.Workload subclass instance."
        )
    return workload


def workload_name(spec: dict[str, Any]) -> str:
    """A short name for study naming, without importing the workload."""
    target = str(spec.get("_target_", "workload"))
    return str(spec.get("name") or target.rpartition(".")[0].rpartition(".")[2] or target)
