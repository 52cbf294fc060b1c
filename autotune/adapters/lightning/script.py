"""A Lightning script tuned with no changed line: the hook a script study puts on
``lightning.pytorch.Trainer`` in its own processes (``autotune -- python train.py ARGS``).

measure/framework_hooks.py imports this module by name when the script imports
``lightning.pytorch.trainer.trainer``; ``install`` then wraps ``Trainer.__init__`` and
``Trainer.fit``:

- **discovery run**: the study's baseline is what the script built: its Trainer's precision,
  accumulation and cuDNN autotuning, and its train loader's batch size, workers, pinning and
  prefetching (read as fit starts); after two training batches the run writes them down and
  ends;
- **trial** (and each side of ``autotune verify``): the trial's Trainer arguments
  (lightning.trainer_kwargs: precision, ``benchmark``, ``accumulate_grad_batches``, the
  global batch kept) go into the Trainer, and at ``fit`` the module and the train loader are
  prepared as ``lightning.tune``'s answer is applied (prepare_module: process knobs, TF32,
  channels_last, compile, the optimizer's implementation; prepare_loader/prepare_datamodule:
  the loader rebuilt with the trial's arguments, whether fit is given it, a DataModule, or
  neither and the module builds it in its own ``train_dataloader``); a trial writes no checkpoint and no log in
  the user's folders, and runs no sanity validation; a callback reports each training batch
  (its samples, the loop's wait between batches, its loss) to the trial's window, which ends
  the process once measured.

Not reached: DDP's strategy (a script under torchrun keeps its own).
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.adapters.lightning import prepare_datamodule, prepare_loader, prepare_module
from autotune.adapters.lightning.workload import (
    AMP_PRECISION,
    LightningWorkload,
    _loader_defaults,
    trainer_kwargs,
)
from autotune.core import distributed
from autotune.core.batch import tensors
from autotune.production.meter import OUT_ENV, Meter
from autotune.production.settings import Source, resolve

#: Process-wide knobs prepare_module applies as fit starts (the host allocator and CUDA's
#: expandable segments must be set before the first allocation: not reached).
PROCESS_KNOBS = ("tf32", "cudnn_benchmark", "cpu_threads")
#: The knobs prepare_module applies to the module, reached by any Lightning script.
MODULE_KNOBS = ("compile", "optimizer_impl")
#: precision strings as the amp knob names them (the inverse of AMP_PRECISION, and the
#: shorthands Lightning accepts).
PRECISION_AMP = {**{v: k for k, v in AMP_PRECISION.items()}, "bf16": "bf16", "16": "fp16",
                 "32": "off", "bf16-true": "off", "16-true": "off", "64-true": "off"}
WRAPPED = "_autotune_hooked"


def install(module: ModuleType) -> None:
    """Wrap ``module.Trainer``'s ``__init__`` and ``fit`` (``module``:
    lightning.pytorch.trainer.trainer, just imported)."""
    cls = module.Trainer
    if getattr(cls.__init__, WRAPPED, False):
        return
    init, fit = cls.__init__, cls.fit

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        source = resolve(None)
        if source.mode == "own" and source.discover is None:
            init(self, *args, **kwargs)
            return
        if source.discover is not None:
            _read_trainer(source, kwargs)
        else:
            kwargs = {**kwargs, **trainer_kwargs(source.best)}
        folder = _own_folder(source)
        if folder is not None:  # a trial or the discovery run: nothing in the user's folders
            kwargs.update(default_root_dir=str(folder), enable_checkpointing=False,
                          logger=False, num_sanity_val_steps=0)
        init(self, *args, **kwargs)
        self._autotune_source = source

    @functools.wraps(fit)
    def fit_hooked(self: Any, model: Any, train_dataloaders: Any = None, *args: Any,
                   **kwargs: Any) -> Any:
        source = getattr(self, "_autotune_source", None)
        if source is None:
            return fit(self, model, train_dataloaders, *args, **kwargs)
        if source.discover is None:  # the trial's (or best.yaml's) loader and module
            best = source.best
            model = prepare_module(model, best)
            if train_dataloaders is not None and hasattr(train_dataloaders, "dataset"):
                train_dataloaders = prepare_loader(train_dataloaders, best)
            elif kwargs.get("datamodule") is not None:
                kwargs["datamodule"] = prepare_datamodule(kwargs["datamodule"], best)
            elif hasattr(train_dataloaders, "train_dataloader"):  # a DataModule, by position
                train_dataloaders = prepare_datamodule(train_dataloaders, best)
            elif train_dataloaders is None and _builds_its_loader(model):
                model = prepare_datamodule(model, best)  # its train_dataloader, rebuilt
        _report_batches(self, source)
        return fit(self, model, train_dataloaders, *args, **kwargs)

    setattr(__init__, WRAPPED, True)
    cls.__init__, cls.fit = __init__, fit_hooked


def _builds_its_loader(module: Any) -> bool:
    """The LightningModule defines its own ``train_dataloader`` (fit given no loader)."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    return bool(is_overridden("train_dataloader", module))


def _own_folder(source: Source) -> Path | None:
    """Where a trial's or the discovery run's Trainer writes (None: a run under best.yaml,
    whose outputs are the user's)."""
    if source.window is not None:
        return Path(source.window.result_path).parent
    if os.environ.get(OUT_ENV):  # a side of verify: it ends at its window, writing nothing
        return Path(os.environ[OUT_ENV]).parent
    return Path(source.discover).parent if source.discover is not None else None


def _read_trainer(source: Source, kwargs: dict[str, Any]) -> None:
    """The script's own Trainer settings (Lightning's defaults where it gives none)."""
    precision = str(kwargs.get("precision", "32-true"))
    source.setting("amp", PRECISION_AMP.get(precision, "off"))
    source.setting("cudnn_benchmark", bool(kwargs.get("benchmark") or False))
    source.own["grad_accum"] = int(kwargs.get("accumulate_grad_batches", 1) or 1)
    source.process, source.framework = PROCESS_KNOBS, "lightning"
    source.limits = {k: [list(v), why] for k, (v, why) in LightningWorkload.knob_limits.items()}
    for knob in MODULE_KNOBS:
        source.setting(knob, source.neutral(knob))


def _read_loader(source: Source, trainer: Any) -> None:
    """The train loader's settings, as fit built it (discovery)."""
    from autotune.adapters.lightning import _train_loader

    loader = _train_loader(trainer)
    if loader is None or not hasattr(loader, "batch_size"):
        return
    for knob, value in _loader_defaults(loader).items():
        source.setting(knob, value)
    source.setting("persistent_workers", bool(getattr(loader, "persistent_workers", False)))
    if int(loader.num_workers) == 0:
        source.setting("prefetch_factor", None)


def _report_batches(trainer: Any, source: Source) -> None:
    """Each training batch to the trial's window (``source.on_step``), the discovery run's
    count, or a verify side's meter: its samples over the ranks, the time between the last
    batch's end and this one's start (the loop's wait for it), and its loss."""
    import lightning.pytorch as pl

    meter = (Meter.from_best(source.best) if source.mode == "best" and os.environ.get(OUT_ENV)
             else None)
    if source.mode == "best" and meter is None:  # a full run: nothing to report
        return
    marks = {"end": 0.0, "wait": 0.0}

    class WindowBatches(pl.Callback):  # type: ignore[misc]
        """Lightning's training batches, as a script's meter.step would report them."""

        def on_train_start(self, trainer: Any, module: Any) -> None:
            if source.discover is not None:
                _read_loader(source, trainer)
            if source.window is not None:
                source.window.meter_made()

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, i: int) -> None:
            now = time.perf_counter()
            marks["wait"] = now - marks["end"] if marks["end"] else 0.0

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any,
                               i: int) -> None:
            first = next(iter(tensors(batch)), None)
            samples = int(first.shape[0]) if first is not None and first.ndim else 1
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if meter is not None:
                meter.add_wait(marks["wait"])
                meter.step(samples, loss=loss)
            else:
                source.on_step(samples * distributed.world_size(), marks["wait"], loss)
            marks["end"] = time.perf_counter()

    trainer.callbacks.append(WindowBatches())


def exports(best: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """lightning.yaml, as ``lightning.tune`` writes it: the Trainer's and the DataLoader's
    arguments and what ``prepare_module`` sets."""
    from autotune.adapters.lightning.workload import lightning_document

    return {"lightning.yaml": lightning_document(best)}
