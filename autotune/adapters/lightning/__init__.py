"""Lightning: tune a LightningModule and its data the way ``Tuner`` does, and apply the result
in one call.

    from autotune.adapters import lightning as at_lightning

    tuned = at_lightning.tune(module, datamodule=dm, trainer_kwargs={"precision": "32-true"},
                              overrides=["study.n_trials=8"])
    module, dm = tuned.apply(module, dm)          # every measured setting, before fit forks
    L.Trainer(**tuned.trainer_kwargs, max_epochs=10).fit(module, datamodule=dm)

``tune`` ships the module and its data to the trial processes (autotune/core/shipping.py; an
object that cannot travel is named), runs the study (autotune.tune: the same study as the
command line) and returns ``LightningTuned``: the Trainer arguments (precision, cuDNN
autotuning, accumulation), the DataLoader arguments, and ``apply``, which sets what no Trainer
argument holds, in this process: glibc's allocator (before fit forks the loader's workers),
torch's threads (this process and each loader worker), TF32 matmuls, channels_last,
torch.compile, the fused/foreach optimizer (set on what ``configure_optimizers`` returns, so its
LR schedulers stay attached), and the DataModule's train loader rebuilt with the measured
arguments. ``autotune verify`` then measures the realized speedup of ``Trainer.fit`` itself
(autotune/adapters/lightning/verify.py).

The study by import paths (``workload._target_=autotune.adapters.lightning.LightningWorkload``)
is in autotune/adapters/lightning/workload.py; both write ``lightning.yaml``.
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

from autotune.adapters import best_document, keeps_own_accumulation
from autotune.adapters.fsdp import shard_configured, sharded_study
from autotune.adapters.lightning.workload import (
    LightningObjectsWorkload,
    LightningWorkload,
    dataloader_kwargs,
    lightning_document,
    optimizers_in,
    trainer_kwargs,
)
from autotune.adapters.lightning.workload import trainer_kwargs as lightning_trainer_kwargs
from autotune.core.host import apply_process_knobs, worker_init
from autotune.core.optimizer_impl import set_optimizer_impl
from autotune.core.shipping import ToShip
from autotune.core.training import loader_kwargs, with_padding
from autotune.production.best import BestConfig, warn_training_changes
from autotune.production.runtime import KnobOverridden

__all__ = ["LightningObjectsWorkload", "LightningTuned", "LightningWorkload", "dataloader_kwargs",
           "lightning_document", "prepare_datamodule", "prepare_loader", "prepare_module",
           "trainer_kwargs", "tune"]


@dataclasses.dataclass
class LightningTuned:
    """A study's result for a LightningModule: ``best`` (best.yaml read back), the Trainer and
    DataLoader arguments, the module and DataModule (or train DataLoader) given to ``tune``
    prepared with it, and ``apply(module, datamodule)`` for other instances."""

    best: BestConfig
    trainer_kwargs: dict[str, Any]
    dataloader_kwargs: dict[str, Any]
    module: Any = None
    datamodule: Any = None
    train_dataloaders: Any = None

    def apply(self, module: nn.Module, datamodule: Any = None) -> tuple[nn.Module, Any]:
        """``(prepare_module(module), prepare_datamodule(datamodule))``: pass both to fit.
        Idempotent: the objects ``tune`` prepared (``self.module``, ``self.datamodule``), or
        any object applied before, are prepared again in place of the earlier preparation,
        never on top of it (each hook wrapped once, the module compiled once)."""
        return (prepare_module(module, self.best),
                prepare_datamodule(datamodule, self.best) if datamodule is not None else None)


def tune(module: nn.Module, datamodule: Any = None, *, train_dataloaders: Any = None,
         trainer_kwargs: Mapping[str, Any] | None = None, overrides: Sequence[str] = (),
         **kwargs: Any) -> LightningTuned:
    """Tune the training speed of ``module`` on ``datamodule`` (or ``train_dataloaders``, a
    DataLoader; else the module's own ``train_dataloader()``), before ``fit``: a study whose
    baseline is your DataLoader settings and ``trainer_kwargs`` (the Trainer arguments you
    train with: its ``precision`` is the baseline's; verify runs your Trainer with them).
    ``overrides`` and ``kwargs`` are autotune.tune's. The returned ``module`` and
    ``datamodule`` are yours, prepared (``apply``: this process's settings are made now, before
    ``fit`` forks the loader's workers). Raises ``autotune.core.shipping.CannotTravel`` naming
    an object that cannot reach the trials, and autotune.tune's exceptions; one that still
    exported a configuration (``CouldNotMeasure`` on a busy machine, ``RegressionFound``)
    carries this result for it as ``tuned``."""
    parts = {"module": module, "datamodule": datamodule, "train_dataloaders": train_dataloaders,
             "trainer_kwargs": dict(trainer_kwargs or {}),
             "module_name": f"{type(module).__module__}.{type(module).__qualname__}"}
    names = {"module": "the LightningModule", "datamodule": "the LightningDataModule",
             "train_dataloaders": "the train DataLoader", "trainer_kwargs": "trainer_kwargs"}
    ship = ToShip(parts, names, target="autotune.adapters.lightning.workload.LightningObjectsWorkload",
                  label=f"lightning-{type(module).__name__.lower()}", on_cpu=["module"])
    # Imported here, not above: a trial process imports this module to build the workload
    # (workload._target_=autotune.adapters.lightning.LightningWorkload) and must not load the
    # driver.
    from autotune.cli.api import StudyError
    from autotune.cli.api import tune as tune_study

    try:
        best = tune_study(list(overrides), workload=ship, **kwargs)
    except StudyError as exc:
        if exc.best is not None:
            exc.tuned = _tuned(exc.best, module, datamodule, train_dataloaders)
        raise
    return _tuned(best, module, datamodule, train_dataloaders)


def _tuned(best: BestConfig, module: nn.Module, datamodule: Any,
           train_dataloaders: Any) -> LightningTuned:
    doc = best_document(best)
    tuned = LightningTuned(best, lightning_trainer_kwargs(doc), dataloader_kwargs(doc))
    tuned.module, tuned.datamodule = tuned.apply(module, datamodule)
    if train_dataloaders is not None:
        tuned.train_dataloaders = prepare_loader(train_dataloaders, best)
    return tuned


def prepare_module(module: nn.Module, best: Any) -> nn.Module:
    """Apply to ``module`` and this process everything the study measured that is not a
    Trainer or DataLoader argument, before ``trainer.fit``: the host allocator and the CPU
    threads (before fit forks the loader's workers), TF32 matmuls, channels_last, the
    optimizer's fused/foreach implementation (on what ``configure_optimizers`` returns) and
    ``torch.compile`` (Lightning unwraps the compiled module and compiles its training_step);
    for a sharded study, ``configure_model`` shards it as the trials did (adapters/fsdp.py).
    Returns the module to pass to ``fit``. A module prepared before (by ``tune``, or by this
    function with this or another study's result; compiled or not) is prepared afresh: its
    hooks are wrapped once, around the module's own, and it is compiled once."""
    inner = getattr(module, "_orig_mod", None)  # torch.compile's wrapper holds the module
    if isinstance(inner, nn.Module) and _ORIGINALS in vars(inner):
        module = inner  # compiled by an earlier preparation: start from the module itself
    doc = lightning_document(best)
    knobs = best_document(best)["knobs"]
    warn_training_changes(best_document(best))
    apply_process_knobs(knobs)
    torch.set_float32_matmul_precision(doc["float32_matmul_precision"])
    if doc["module"]["channels_last"]:
        module = module.to(memory_format=torch.channels_last)
    for hook in _IF_MEASURED:  # an earlier preparation's, which this result may not want
        _restore(module, hook)
    if knobs.get("optimizer_impl", "default") != "default":
        _optimizers_with(module, knobs)
    _check_at_train_start(module, best_document(best))
    if sharded_study(best_document(best)):  # FSDP2: ModelParallelStrategy shards in this hook
        _shard_in_configure_model(module, knobs)
    if doc["module"]["compile"]:
        return torch.compile(module, mode=doc["module"]["compile"]["mode"])  # type: ignore[return-value]
    return module


#: The hooks a preparation wraps only for some results (the optimizer's implementation, a
#: sharded study's ``configure_model``): undone before each preparation, so a module prepared
#: sharded and then with an unsharded result keeps no hook that indexes a device mesh the
#: Trainer's strategy does not make.
_IF_MEASURED = ("configure_optimizers", "configure_model")
#: Where a prepared object keeps the hooks autotune replaced on it (``{name: the object's own
#: attribute, or None for its class's method}``), so that preparing it again wraps the
#: object's own hook, not autotune's wrapper of it.
_ORIGINALS = "_autotune_originals"


def _own(obj: Any, name: str) -> Any:
    """``obj.<name>`` as it was before autotune first wrapped it."""
    originals = vars(obj).setdefault(_ORIGINALS, {})  # vars(): not an nn.Module attribute
    if name not in originals:
        originals[name] = vars(obj).get(name)
    own = originals[name]
    return own if own is not None else getattr(type(obj), name).__get__(obj)


def _wrap(obj: Any, name: str, method: Callable[..., Any]) -> None:
    """Set ``obj.<name>`` to ``method`` bound to ``obj`` (a wrapper of ``_own(obj, name)``)."""
    _own(obj, name)  # remembered before it is replaced
    setattr(obj, name, types.MethodType(method, obj))


def _restore(obj: Any, name: str) -> None:
    """Undo an earlier preparation's wrapper of ``obj.<name>``, if there is one."""
    originals = vars(obj).get(_ORIGINALS, {})
    if name not in originals:
        return
    own = originals.pop(name)
    if own is None:
        vars(obj).pop(name, None)
    else:
        setattr(obj, name, own)


def _optimizers_with(module: Any, knobs: dict[str, Any]) -> None:
    """``configure_optimizers`` wrapped: what it returns (schedulers and all), with each
    optimizer's implementation set in place (optimizer_impl.set_optimizer_impl, as in the trials)."""
    original = _own(module, "configure_optimizers")

    def configure_optimizers(self: Any) -> Any:
        out = original()
        for opt in optimizers_in(out):
            set_optimizer_impl(opt, knobs)
        return out

    _wrap(module, "configure_optimizers", configure_optimizers)


def _shard_in_configure_model(module: Any, knobs: dict[str, Any]) -> None:
    """``configure_model`` wrapped: the module's own hook (Lightning's, a no-op, if it has
    none), then sharded as the trials did (adapters/fsdp.shard_configured)."""
    original = _own(module, "configure_model")

    def configure_model(self: Any) -> None:
        original()
        shard_configured(self, knobs)

    _wrap(module, "configure_model", configure_model)


def _check_at_train_start(module: Any, doc: dict[str, Any]) -> None:
    """What prepare_module cannot set from inside (the Trainer's arguments, a loader the user
    builds): checked when training starts (the train loader is built by then), with one
    KnobOverridden warning naming each setting that differs from the measured one and the
    line that applies it."""
    original = _own(module, "on_train_start")
    want = lightning_trainer_kwargs(doc)
    loader_want = dataloader_kwargs(doc)

    def on_train_start(self: Any) -> None:
        trainer = self.trainer
        have = {"precision": str(trainer.precision),
                "accumulate_grad_batches": trainer.accumulate_grad_batches,
                "benchmark": bool(torch.backends.cudnn.benchmark),
                "devices": trainer.num_devices}
        # The strategy is an object: its arguments are not compared here.
        off = [f"{k}={have[k]!r} (measured {v!r})" for k, v in want.items()
               if k in have and have[k] != v]
        if off:
            _warn(f"the Trainer runs {', '.join(off)}: pass L.Trainer(**autotune.adapters."
                  "lightning.trainer_kwargs(best), ...) (or tune(...).trainer_kwargs)")
        keeps_own_accumulation(doc, trainer.accumulate_grad_batches, "accumulate_grad_batches")
        loader = _train_loader(trainer)
        if loader is not None:
            got = {k: getattr(loader, k, None) for k in ("batch_size", "num_workers")}
            odd = [f"{k}={v!r} (measured {loader_want[k]!r})" for k, v in got.items()
                   if v is not None and v != loader_want[k]]
            if odd:
                _warn(f"the train DataLoader has {', '.join(odd)}: pass the DataModule through "
                      "autotune.adapters.lightning.prepare_datamodule(dm, best) (or a loader "
                      "through prepare_loader)")
        original()

    _wrap(module, "on_train_start", on_train_start)


def _train_loader(trainer: Any) -> Any:
    """The loader fit trains on, where Lightning has built it already (None otherwise)."""
    try:
        loader = trainer.fit_loop._combined_loader
        return loader.flattened[0] if loader is not None and loader.flattened else None
    except Exception:  # noqa: BLE001 - Lightning internals: no check rather than a wrong one
        return None


def _warn(text: str) -> None:
    warnings.warn(f"autotune: {text}; the study's figure assumes it.", KnobOverridden,
                  stacklevel=3)


def prepare_loader(loader: DataLoader, best: Any) -> DataLoader:
    """``loader`` rebuilt with the measured DataLoader arguments (batch size, workers, pinning,
    prefetch, persistence), each worker's torch threads and the collator's padding; its
    dataset, collate function, shuffling and drop_last kept."""
    knobs = best_document(best)["knobs"]
    kwargs = loader_kwargs(knobs)
    return DataLoader(loader.dataset, shuffle=isinstance(loader.sampler, RandomSampler),
                      collate_fn=with_padding(loader.collate_fn, knobs), drop_last=loader.drop_last,
                      worker_init_fn=worker_init({**knobs, **kwargs}, loader.worker_init_fn),
                      **kwargs)


def prepare_datamodule(datamodule: Any, best: Any) -> Any:
    """``datamodule`` whose ``train_dataloader()`` returns its own loader rebuilt with the
    measured arguments (``prepare_loader``); the DataModule object itself is returned. A
    DataModule prepared before is prepared afresh: its own loader is rebuilt once."""
    original = _own(datamodule, "train_dataloader")

    def train_dataloader(self: Any) -> DataLoader:
        return prepare_loader(original(), best)

    _wrap(datamodule, "train_dataloader", train_dataloader)
    return datamodule
