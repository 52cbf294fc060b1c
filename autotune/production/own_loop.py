"""The measured knobs as the lines of a training loop the user writes and keeps: each call
returns the plain PyTorch object that line needs (a context manager, a GradScaler, a compiled
module, tensors on the device), built by the functions the trials ran, so the loop's own
gradient clipping, scheduler, evaluation and checkpointing stay where they are::

    loader = DataLoader(train_set, shuffle=True, drop_last=True,
                        worker_init_fn=rt.worker_init_fn(), **rt.loader_kwargs())
    model = rt.model(Net())                        # device, memory format, attention, checkpointing
    forward = rt.compile(model)                    # torch.compile as measured (or the model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **rt.optimizer_kwargs())
    scaler = rt.grad_scaler()                      # fp16: a GradScaler; else a disabled one
    for x, y in loader:
        x, y = rt.to_device(x, y)                  # non_blocking copy, channels_last inputs
        with rt.autocast():                        # amp (and SDPA's backend)
            loss = loss_fn(forward(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt); clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt); scaler.update()
        rt.zero_grad(opt)                          # set_to_none as measured

``Runtime`` (autotune/production/runtime.py) carries these methods; the same knobs applied as one
step object are ``rt.wrap(...)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from autotune.core import batch as tree
from autotune.core import sequences
from autotune.core.host import worker_init
from autotune.core.optimizer_impl import set_optimizer_impl
from autotune.core.stages import Stage, run_device_stages
from autotune.core.training import AMP_DTYPES, compile_model
from autotune.production import batch_source
from autotune.production.best import BestConfig
from autotune.production.settings import AMP_NAMES, Source


class MeasuredAutocast(contextlib.ContextDecorator):
    """``rt.autocast()``: autocast and SDPA's pinned backend, entered afresh at each ``with``
    (a generator-based context runs once: nanoGPT's ``ctx``, kept and entered at every step,
    failed on its second ``with``). Nested entries each get their own contexts."""

    def __init__(self, device_type: str, dtype: torch.dtype | None, knobs: dict[str, Any],
                 on_enter: Callable[[], None]):
        self.device_type, self.dtype, self.knobs, self._on_enter = device_type, dtype, knobs, \
            on_enter
        self._open: list[contextlib.ExitStack] = []

    def __enter__(self) -> None:
        self._on_enter()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.autocast(self.device_type, dtype=self.dtype or torch.float32,
                                           enabled=self.dtype is not None))
        stack.enter_context(sequences.attention_backend(self.knobs))
        self._open.append(stack)

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._open.pop().__exit__(*exc))


class OwnLoop:
    """The calls of a hand-written loop (mixed into ``Runtime``, which sets the attributes)."""

    knobs: dict[str, Any]
    device: torch.device
    stages: list[Stage]
    best: BestConfig
    source: Source  # where the knobs come from (production/settings.py)
    _meter: Any  # the run's Meter, once rt.meter() made it

    def _override(self, knob: str, have: Any, want: Any, where: str) -> None:
        raise NotImplementedError  # Runtime's: one KnobOverridden warning per knob

    def _say_once(self, key: str, text: str, warn: bool) -> None:
        raise NotImplementedError  # Runtime's: a KnobOverridden warning, or a log line

    def setting(self, knob: str, own: Any) -> Any:
        """The value of ``knob`` for this run, for a line of your own that applies it:
        ``own`` (your script's value) before any study, the trial's in a study of your script,
        the measured one with a best.yaml. ``batch_size = rt.setting("batch_size", 12)`` for
        a loop whose batches come from a function (nanoGPT's ``get_batch``)."""
        if knob not in self.knobs:
            raise ValueError(f"rt.setting({knob!r}, ...): not a knob; knobs: "
                             f"{', '.join(sorted(self.knobs))}")
        return self.source.setting(knob, own)

    @property
    def batch_size(self) -> int:
        """The measured batch size (``knobs.batch_size``), for a loop that makes its own
        batches: ``get_batch`` reading ``rt.batch_size`` and ``meter.step(rt.batch_size)``."""
        if self.knobs.get("batch_size") is None:
            raise ValueError("rt.batch_size: no batch size is set: with no best.yaml the Runtime "
                             "runs your script's own settings; give yours with "
                             "rt.loader_kwargs(batch_size=...)")
        return int(self.knobs["batch_size"])

    def batches(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A function that makes each batch (nanoGPT's ``get_batch``: random slices of a
        memmap), as the loop calls it: ``get_batch = rt.batches(get_batch)``. Each call is
        timed as the loop's wait for its batch (for ``rt.meter()``, which can then tell a
        slower batch from a slower step), and the CPU tensors it returns are pinned and
        copied to the device as measured (``pin_memory``, ``non_blocking``; tensors the
        function put on the device already pass as they are; a pair comes back as
        ``rt.to_device(x, y)`` gives it).

        Said once, here (autotune/production/batch_source.py): which measured knobs do not
        apply, being a DataLoader's (workers, prefetching, persistent workers, the
        collating knobs; a ``KnobOverridden`` warning where the study measured them
        otherwise than a function amounts to, else one ``autotune`` log line), and which
        do."""
        lost, text = batch_source.notice(getattr(fn, "__name__", "the batch function"),
                                         self.knobs, self.device,
                                         self.best.metrics.get("samples_per_sec"))
        self._say_once("batch_function", text, lost)
        return batch_source.BatchFunction(fn, self)

    def _batch_to_device(self, batch: Any) -> Any:
        if self.device.type == "cuda" and self.knobs.get("pin_memory"):
            batch = batch_source.pin_host_tensors(batch)
        if isinstance(batch, tuple) and len(batch) == 2:
            return self.to_device(*batch)
        return self.to_device(batch)[0]

    def apply_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The measured ``optimizer_impl`` set on an optimizer your code built, such as
        ``model.configure_optimizers(...)`` with parameter groups, which takes no
        ``**rt.optimizer_kwargs()``: ``fused=True`` / ``foreach=True`` in every parameter
        group (each group's own key overrides a constructor argument) and in its defaults, in
        place, before its first step (a scheduler built on it stays attached); returns it.
        optimizer_impl=default leaves it as built, as the study's workload built it. Refused
        (ValueError, naming what the class takes) where the optimizer's class has no such
        argument or has already stepped."""
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        self.source.optimizer = type(optimizer).__name__
        self.source.setting("optimizer_impl", "fused" if group.get("fused") else
                            "foreach" if group.get("foreach") else "default")
        try:
            return set_optimizer_impl(optimizer, self.knobs)
        except ValueError as exc:
            raise ValueError(f"rt.apply_optimizer(): {exc}") from None

    def worker_init_fn(self, then: Callable[[int], Any] | None = None) -> Callable[[int], Any] | None:
        """The DataLoader's ``worker_init_fn``: each worker's torch threads as the trials'
        workers had them, then ``then`` (yours) if given; ``then`` itself where no worker
        threads were measured (no workers, or no ``cpu_threads`` knob)."""
        return worker_init(self.knobs, then)

    def compile(self, model: nn.Module, mode: str | None = None) -> Callable[..., Any]:
        """What the loop calls for the forward: ``torch.compile(model, mode=...)`` as measured,
        or ``model`` itself (compile=off, or already compiled). Keep ``model`` for
        ``state_dict()``, evaluation and checkpoints. ``mode``: your script's own
        (``"default"``, ``"reduce-overhead"``...; None: eager), its run before any study."""
        self.source.setting("compile", mode or "off")
        return compile_model(model, self.knobs)

    def to_device(self, inputs: Any, targets: Any = None, *,
                  device_transform: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
        """A batch's inputs and targets on the device (any nesting of tensors), as the trial's
        step had them: the copy (``non_blocking`` as measured), the input stages that
        ``transform_split`` put on the device (given to ``rt.dataloader(stages=)``), your
        ``device_transform`` where the study sent uint8 (``transfer_dtype``), and 4-D inputs
        in ``channels_last`` where measured."""
        non_blocking = bool(self.source.setting("non_blocking", False))
        if isinstance(inputs, torch.Tensor) and inputs.dim() == 4:
            self.source.image_inputs = True
        split = int(self.knobs.get("transform_split", len(self.stages)))
        device_stages = self.stages[split:]
        if not (device_stages and device_stages[0].host_input):  # decode_jpeg reads host bytes
            inputs = tree.move(inputs, self.device, non_blocking)
        targets = tree.move(targets, self.device, non_blocking)
        if device_stages:
            inputs = run_device_stages(device_stages, inputs, self.device)
        if self.knobs["transfer_dtype"] == "uint8":
            if device_transform is None:
                self._override("transfer_dtype", "no device_transform given to rt.to_device()",
                               "uint8", "the loop")
            else:
                inputs = device_transform(inputs)
        if self.knobs["channels_last"]:
            inputs = tree.channels_last(inputs)
        return inputs, targets

    def autocast(self, dtype: torch.dtype | None = None) -> MeasuredAutocast:
        """The forward and the loss under the measured mixed precision
        (``torch.autocast(device, dtype)``, disabled for amp=off) and SDPA's pinned backend
        (the ``attention`` knob's ``sdpa_*`` values). Run the backward outside it, as
        PyTorch's AMP recipe does (with activation checkpointing and a pinned backend, inside
        ``rt.attention_backend()``: the recomputed forward needs the same backend).

        The context can be kept and entered again, as nanoGPT keeps its ``ctx``:
        ``ctx = rt.autocast()`` once, then ``with ctx:`` at every step. ``dtype``: your
        script's own mixed precision (``torch.bfloat16``; None: full precision), its run
        before any study."""
        if dtype not in AMP_NAMES:
            raise ValueError(f"rt.autocast(dtype={dtype!r}): your own precision is one of "
                             "None (full precision), torch.bfloat16, torch.float16")
        self.source.setting("amp", AMP_NAMES[dtype])
        dtype = AMP_DTYPES.get(str(self.knobs["amp"]))
        return MeasuredAutocast(self.device.type, dtype, self.knobs, self._no_graph_here)

    def attention_backend(self) -> contextlib.AbstractContextManager[None]:
        """SDPA restricted to the measured backend (``torch.nn.attention.sdpa_kernel``), or
        nothing: for a backward that recomputes checkpointed layers."""
        return sequences.attention_backend(self.knobs)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """``torch.amp.GradScaler`` for amp=fp16; otherwise a disabled one, whose
        ``scale``/``unscale_``/``step``/``update`` pass straight through, so the loop's lines
        are the same for every precision (bf16 has fp32's range and needs no scaling)."""
        return torch.amp.GradScaler(self.device.type, enabled=self.knobs["amp"] == "fp16")

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        """``optimizer.zero_grad(set_to_none=...)`` as measured: freed (None) or zeroed in
        place. ``set_to_none``: your script's own (torch's default, True)."""
        self.source.optimizer = self.source.optimizer or type(optimizer).__name__
        optimizer.zero_grad(set_to_none=bool(self.source.setting("set_to_none", set_to_none)))

    def _no_graph_here(self) -> None:
        """A whole-step CUDA Graph is captured by ``rt.wrap(...).step()`` only: a loop of its
        own runs without it, and is told once (tune with knobs.cuda_graphs=false for one)."""
        if self.knobs.get("cuda_graphs"):
            self._override("cuda_graphs", False, True, "a loop of your own (only "
                           "rt.wrap(model, optimizer, loss_fn, loader=...).step() captures the "
                           "whole step in a CUDA Graph)")
