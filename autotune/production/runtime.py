"""best.yaml applied to the user's own training loop, through the code the trials ran.

A production run keeps its own DataLoader, model, optimizer and loop; ``Runtime`` hands each
of them the measured knobs through the functions ``Training`` itself calls
(``loader_kwargs``, ``place_model``, ``optimizer_kwargs``, ``compile_model``, the step and
the batch move of ``Training``), so what runs is what was measured::

    rt = autotune.Runtime("studies/mlp-cpu/best.yaml")          # or load_best(...) / a Hydra node
    loader = rt.dataloader(dataset, shuffle=True)               # workers, pinning, prefetch, batch
    #   or rt.dataloader(raw_items, stages=stages): the host part of transform_split's split
    model = rt.model(MyNet())                                   # device, channels_last
    #   under torchrun: model = rt.parallel(model), DDP or FSDP2 as measured, before the optimizer
    opt = rt.optimizer(torch.optim.AdamW, model.parameters(), lr=1e-3)   # fused / foreach
    run = rt.wrap(model, opt, loss_fn, loader=loader)           # autocast, GradScaler, compile,
    meter = rt.meter()                                          # CUDA Graphs, set_to_none
    for inputs, targets in meter.wrap(loader):
        loss = run.step(*run.to_device(inputs, targets))
        meter.step(len(targets))

A loop whose batches come from a function rather than a DataLoader (nanoGPT's ``get_batch``)
keeps it: ``get_batch = rt.batches(get_batch)`` times each call for the meter and says once
which loader knobs cannot apply; an optimizer the model builds with parameter groups gets
the measured implementation through ``rt.apply_optimizer(model.configure_optimizers(...))``.

Where the user's code sets a knob otherwise (its own DataLoader arguments, an already compiled
model, an optimizer without ``fused=``), the user's choice stands and one ``KnobOverridden``
warning per knob says what differs from the measured configuration.
"""

from __future__ import annotations

import inspect
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune.core import distributed, sequences
from autotune.core.host import apply_process_knobs, worker_init
from autotune.core.optimizer_impl import optimizer_kwargs
from autotune.core.stages import Stage, check_split
from autotune.core.training import (
    Training,
    input_dataset,
    loader_kwargs,
    place_model,
    with_padding,
)
from autotune.core.workload import Workload
from autotune.production.best import BestConfig, warn_training_changes
from autotune.production.compiled import COMPILE_MODES, compiled, compiled_mode
from autotune.production.meter import Meter
from autotune.production.own_loop import OwnLoop
from autotune.production.ranks import Ranks
from autotune.production.settings import BEST_ENV, neutral_knobs, resolve

log = logging.getLogger("autotune")

__all__ = ["BEST_ENV", "COMPILE_MODES", "KnobOverridden", "Runtime", "compiled_mode"]
#: The DataLoader arguments a script gives ``rt.loader_kwargs`` as its own values.
LOADER_KNOBS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor",
                "persistent_workers")


class KnobOverridden(UserWarning):
    """The user's code sets a knob to another value than the one measured: theirs stands."""


class _UserParts(Workload):
    """The user's loss and device transform, seen by ``Training`` as a workload."""

    name = "user"

    def __init__(self, loss_fn: Callable[[Any, Any], torch.Tensor] | None,
                 device_transform: Callable[[Any], Any] | None,
                 split: Callable[[Any], tuple[Any, Any]] | None = None,
                 stages: Sequence[Stage] = (), raw: Dataset | None = None):
        self.loss_fn, self.transform, self.split = loss_fn, device_transform, split
        self._stages, self._raw = list(stages), raw

    def stages(self) -> list[Stage]:
        return self._stages

    def raw_dataset(self) -> Dataset:
        assert self._raw is not None, "a staged loader is built from its raw dataset"
        return self._raw

    def split_batch(self, batch: Any) -> tuple[Any, Any]:
        return self.split(batch) if self.split is not None else super().split_batch(batch)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        if self.loss_fn is not None:
            return self.loss_fn(outputs, targets)
        return super().loss(outputs, targets)  # the model's own loss, where the base has one

    def device_transform(self, inputs: Any) -> Any:
        return self.transform(inputs) if self.transform is not None else inputs


class Runtime(OwnLoop, Ranks):
    """A study's best configuration, applied piece by piece to the user's own objects: as the
    trials' step object (``wrap``), or line by line in a loop the user keeps (``loader_kwargs``,
    ``model``, ``compile``, ``optimizer_kwargs``, ``apply_optimizer``, ``to_device``,
    ``batches``, ``autocast``, ``grad_scaler``, ``zero_grad``:
    autotune/production/own_loop.py).

    ``best``: a path to best.yaml, a ``BestConfig`` (``load_best``), or a mapping with its
    ``knobs`` (e.g. the node a Hydra app gets from ``+autotune=best``); the environment
    variable AUTOTUNE_BEST, where set, names the one to use instead. Without either (``best``
    None), each call returns the value your script passes it (``rt.loader_kwargs(batch_size=32,
    num_workers=2)``, ``rt.autocast()``...): the script trains as written, and ``autotune --
    python train.py`` takes those values as its baseline and runs its trials through the same
    calls (production/settings.py). ``device``: where
    to train; ``"auto"`` is the study's device type where available here, else the CPU.
    Process-wide knobs (TF32, cuDNN autotuning, the host allocator, the CPU threads) are
    applied now: build the Runtime before the DataLoader forks its workers."""

    def __init__(self, best: BestConfig | str | os.PathLike[str] | Mapping[str, Any] | None = None,
                 device: str | torch.device = "auto"):
        #: Where the knobs come from (production/settings.py): best.yaml, a script trial's
        #: window, or, with no best.yaml, the values the script's own calls pass.
        self.source = resolve(best)
        best = self.source.best
        self.best = best
        self.knobs: dict[str, Any] = best.knobs  # the source's own: a script's values land here
        self.device = torch.device(_resolve_device(device, best))
        self._grad_accum = int(best.document.get("grad_accum") or 1)
        self._warned: set[str] = set()
        self._meter: Meter | None = None
        #: The input stages given to ``dataloader(stages=)``: ``wrap`` runs their device part.
        self.stages: list[Stage] = []
        #: A rank under torchrun of a study that measured ranks (best.yaml ``launch``): pinned
        #: to its share of the node's cores first, as the trial's rank was, then its threads.
        self.cores = self._pin_rank()
        if self.source.mode != "own":  # a script's own run keeps the process as it is
            apply_process_knobs(self.knobs)
            warn_training_changes(best.document)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step where the study kept a global batch
        (``study.keep_global_batch``): best.yaml's ``grad_accum``, 1 when absent (and in a
        script's own run)."""
        self.source.grad_accum_read = True
        return self._grad_accum

    # --- the loader --------------------------------------------------------------------------
    def loader_kwargs(self, **own: Any) -> dict[str, Any]:
        """The DataLoader arguments the study measured (batch size, workers, pinning,
        prefetch, persistence), as the trial's loader got them. ``own``: your script's own
        values (``rt.loader_kwargs(batch_size=32, num_workers=2)``), which it runs with
        before any study and which the study takes as its baseline; measured values replace
        them."""
        bad = sorted(set(own) - set(LOADER_KNOBS))
        if bad:
            raise TypeError(f"rt.loader_kwargs() got {', '.join(bad)}: it takes your own "
                            f"values of {', '.join(LOADER_KNOBS)}; pass the DataLoader's other "
                            "arguments to the DataLoader itself")
        neutral = neutral_knobs()
        for key in LOADER_KNOBS:  # the DataLoader's every knob is reached by these arguments
            self.source.setting(key, own.get(key, neutral[key]))
        if self.knobs.get("batch_size") is None:
            raise ValueError("rt.loader_kwargs(): no batch size: with no best.yaml the "
                             "Runtime runs your script's own settings, so give yours "
                             "(rt.loader_kwargs(batch_size=32, num_workers=2))")
        return loader_kwargs(self.knobs)

    def dataloader(self, dataset: Dataset, *, stages: Sequence[Stage] | None = None,
                   **kwargs: Any) -> DataLoader:
        """``DataLoader(dataset, **measured, **kwargs)``; a keyword that sets a knob to
        another value than the measured one wins, with a warning. ``drop_last`` defaults to
        True, as in the trials (a short last batch recompiles a compiled model and cannot
        replay a CUDA Graph).

        ``stages``: the input pipeline as stages (``autotune.core.stages``; a workload's
        ``stages()``), ``dataset`` then being its raw items (``raw_dataset()``). The loader
        runs the first ``transform_split`` stages per sample, as the trials' loader did
        (``training.input_dataset``), and ``wrap`` runs the rest on the device after the
        copy. Without them, a study that moved stages to the device warns: a plain dataset
        runs its whole pipeline on the host."""
        measured = self.loader_kwargs()
        for key, value in kwargs.items():
            if key in measured and measured[key] != value:
                self._override(key, value, measured[key], "the DataLoader argument")
        if stages is None:
            self._check_split("rt.dataloader() without stages=")
        else:
            self.stages = list(stages)
            dataset, collate = input_dataset(_UserParts(None, None, stages=stages, raw=dataset),
                                             self.knobs)
            if collate is not None:
                kwargs.setdefault("collate_fn", collate)
        if distributed.world_size() > 1 and "sampler" not in kwargs:
            # Each rank its own part of every epoch, as the trial's ranks read it.
            kwargs["sampler"] = distributed.sampler(dataset, int(kwargs.pop("seed", 0)))
            kwargs.pop("shuffle", None)
        if "collate_fn" in kwargs:  # a padding collator pads to the measured multiple
            kwargs["collate_fn"] = with_padding(kwargs["collate_fn"], self.knobs)
        if self.knobs.get("padding_free"):  # packed, as the trials' batches were
            kwargs["collate_fn"] = sequences.packing_collator(kwargs.get("collate_fn"))
        if self.knobs.get("length_grouping") and "sampler" not in kwargs:
            kwargs["sampler"] = sequences.grouped_sampler(
                dataset, int(self.knobs["batch_size"]), int(kwargs.pop("seed", 0)),
                sequences.sample_lengths(dataset))
            kwargs.pop("shuffle", None)
        # Each worker's torch threads, as the trials' workers got them (then the caller's own
        # worker_init_fn, if any).
        kwargs["worker_init_fn"] = worker_init({**self.knobs, **{
            k: kwargs[k] for k in ("num_workers",) if k in kwargs}}, kwargs.get("worker_init_fn"))
        return DataLoader(dataset, **{"drop_last": True, **measured, **kwargs})

    def device_split(self) -> bool | None:
        """Whether best.yaml runs input stages on the device: its ``transform_split`` below
        the workload's stage count (``input_stages``, or the stages given here). None: an
        older best.yaml without ``input_stages`` and no stages given, so it cannot be told."""
        count = len(self.stages) if self.stages else self.best.document.get("input_stages")
        if count is None:
            return None
        return int(self.knobs.get("transform_split", count)) < int(count)

    def _check_split(self, where: str) -> None:
        if self.device_split() and not self.stages:
            self._override("transform_split", "a loader running the whole input pipeline on "
                           "the host (pass stages= to rt.dataloader())",
                           self.knobs["transform_split"], where)

    def check_loader(self, loader: DataLoader) -> None:
        """Warn (once per knob) where a DataLoader built elsewhere differs from the measured
        arguments."""
        for key, want in self.loader_kwargs().items():
            have = getattr(loader, key, want)
            if have is not None and have != want:
                self._override(key, have, want, "the DataLoader")

    # --- the model and the optimizer ---------------------------------------------------------
    def model(self, model: nn.Module, checkpoint_layers: tuple[type, ...] = ()) -> nn.Module:
        """The model on the device, in the measured memory format, in training mode. Build
        the optimizer from the returned model's parameters. Compilation happens in ``wrap``
        (as in the trials); an already compiled model is kept, with a warning if the study
        measured it otherwise (``compiled_mode``; where the mode cannot be told, the warning
        says so)."""
        self.source.setting("channels_last", False)
        if compiled(model):
            mode, want = compiled_mode(model), self.knobs["compile"]
            if mode is None:
                self._override("compile", "an already compiled model whose mode cannot be told "
                               "(not inductor, or another torch version)", want, "the model")
            elif mode != want:
                self._override("compile", mode, want, "the model (already compiled)")
        return place_model(model, self.knobs, self.device, checkpoint_layers)

    def optimizer_kwargs(self, **own: Any) -> dict[str, Any]:
        """``foreach=`` / ``fused=`` as measured (``{}``: torch's default); ``own``: your
        script's own (``fused=True``), run before any study and the study's baseline."""
        self.source.setting("optimizer_impl", _impl_name(own))
        return optimizer_kwargs(self.knobs)

    def optimizer(self, cls: Callable[..., torch.optim.Optimizer], params: Iterable[Any],
                  **kwargs: Any) -> torch.optim.Optimizer:
        """``cls(params, **kwargs, **measured)``; an implementation flag the class does not
        take is left out with a warning; one the caller passes wins, with a warning."""
        self.source.optimizer = getattr(cls, "__name__", "")
        if self.source.mode != "best":  # the script's own flags are its baseline's
            own: dict[str, Any] = {k: kwargs.pop(k) for k in ("fused", "foreach") if k in kwargs}
            self.source.setting("optimizer_impl", _impl_name(own))
        measured = self.optimizer_kwargs()
        try:
            accepted = inspect.signature(cls).parameters
        except (TypeError, ValueError):
            accepted = None
        for key, value in measured.items():
            if key in kwargs:
                if kwargs[key] != value:
                    self._override("optimizer_impl", f"{key}={kwargs[key]}", f"{key}={value}",
                                   "the optimizer arguments")
            elif accepted is not None and key not in accepted and not _takes_kwargs(accepted):
                self._override("optimizer_impl", f"{getattr(cls, '__name__', cls)} without {key}=",
                               f"{key}={value}", "the optimizer class")
            else:
                kwargs[key] = value
        return cls(params, **kwargs)

    def check_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Warn where an optimizer built elsewhere uses another implementation."""
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        impl = ("fused" if group.get("fused") else "foreach" if group.get("foreach")
                else "default")
        want = self.knobs["optimizer_impl"]
        if impl != want and not (want == "default" and group.get("foreach") is None):
            self._override("optimizer_impl", impl, want, "the optimizer")

    # --- the step ----------------------------------------------------------------------------
    def wrap(self, model: nn.Module, optimizer: torch.optim.Optimizer,
             loss_fn: Callable[[Any, Any], torch.Tensor] | None = None, *,
             loader: DataLoader | None = None,
             device_transform: Callable[[Any], Any] | None = None,
             split_batch: Callable[[Any], tuple[Any, Any]] | None = None,
             stages: Sequence[Stage] | None = None,
             max_grad_norm: float | None = None) -> Training:
        """The trials' own step object around the user's model, optimizer and loss:
        ``run.to_device(inputs, targets)`` (transfer dtype, non_blocking), then
        ``run.step(inputs, targets)`` (device transform, memory format, autocast, GradScaler,
        zero_grad(set_to_none), compile, a captured CUDA Graph where measured). ``loader`` is
        checked against the measured arguments, and is needed for a CUDA Graph capture (its
        first batch gives the static shapes). ``device_transform`` finishes uint8 batches on
        the device when the study chose ``transfer_dtype=uint8``. Batches of any structure
        (autotune/core/batch.py): ``run.split(batch)`` gives ``(inputs, targets)`` of a pair or a
        mapping (labels inside, targets None), or as ``split_batch`` says; without
        ``loss_fn`` the loss is the model's own (``outputs.loss`` / ``outputs["loss"]``).
        ``stages``: the input stages, where ``rt.dataloader(stages=)`` did not give them:
        ``prepare`` runs those after ``transform_split`` on the device, as the trial did.
        ``max_grad_norm``: the gradients' norm is clipped to it in each step, after the
        GradScaler unscales them (as the trials' ``Workload.max_grad_norm``)."""
        if stages is not None:
            self.stages = list(stages)
        if self.stages:  # a split these stages do not allow: the error names the valid ones
            check_split(self.stages, int(self.knobs.get("transform_split", len(self.stages))))
        if loader is not None:
            self.check_loader(loader)
            self._check_split("the DataLoader given to wrap()")
        self.check_optimizer(optimizer)
        if self.knobs["transfer_dtype"] == "uint8" and device_transform is None:
            self._override("transfer_dtype", "no device_transform given", "uint8",
                           "wrap()'s arguments")
        if self.knobs["cuda_graphs"] and loader is None:
            raise ValueError("cuda_graphs=True: pass loader= to wrap(); its first batch gives "
                             "the captured step its static shapes")
        if next(model.parameters(), torch.empty(0, device=self.device)).device.type != \
                self.device.type:  # not placed by rt.model() yet
            model = self.model(model)
        parts = _UserParts(loss_fn, device_transform, split_batch, stages=self.stages)
        run = Training.around(parts, self.knobs, self.device, model, optimizer, loader,
                              grad_accum=self.grad_accum)
        run.max_grad_norm = max_grad_norm
        return run

    def meter(self, **kwargs: Any) -> Meter:
        """The run's production meter against the study's confirmed samples/sec (see
        ``Meter``), made at the first call (``kwargs``: its settings, e.g. ``warmup_steps``);
        later calls return the same one, so ``rt.meter().step(n)`` in a loop counts into it
        and ``rt.batches`` times each batch for it."""
        if self._meter is None and self.source.mode != "best":  # no figure to compare with
            self._meter = Meter(None, knobs=self.knobs, device=self.device.type,
                                on_step=self.source.on_step, **kwargs)
            if self.source.window is not None:
                self.source.window.meter_made()
        elif self._meter is None:
            self._meter = Meter.from_best(self.best, device=self.device.type, **kwargs)
        elif kwargs:
            raise ValueError(f"rt.meter({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}): "
                             "this run's meter exists already; its settings are given at the "
                             "first rt.meter() call, which makes it.")
        return self._meter

    def _say_once(self, key: str, text: str, warn: bool) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        if warn:
            warnings.warn(text, KnobOverridden, stacklevel=3)
        else:
            log.info(text)

    def _override(self, knob: str, have: Any, want: Any, where: str) -> None:
        if knob in self._warned:
            return
        self._warned.add(knob)
        warnings.warn(
            f"autotune: {where} sets {knob}={have!r} but the study measured {knob}={want!r}; "
            f"yours is used, so this run may not reach the study's "
            f"{self.best.metrics.get('samples_per_sec')} samples/s. Remove the setting from "
            "your code to apply the measured value.", KnobOverridden, stacklevel=3)


def _impl_name(flags: Mapping[str, Any]) -> str:
    """The ``optimizer_impl`` value of an optimizer's ``fused=`` / ``foreach=`` arguments."""
    return "fused" if flags.get("fused") else "foreach" if flags.get("foreach") else "default"


def _takes_kwargs(params: Mapping[str, inspect.Parameter]) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in params.values())


def _resolve_device(device: str | torch.device, best: BestConfig) -> str:
    if str(device) != "auto":
        return str(device)
    measured = (best.document.get("device") or {}).get("type")
    if measured == "cuda" and torch.cuda.is_available():
        local = os.environ.get("LOCAL_RANK")  # a torchrun rank: its own GPU
        return f"cuda:{local}" if local is not None and best.document.get("launch") else "cuda"
    return "cpu"
