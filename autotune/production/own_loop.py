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
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from autotune.core import batch as tree
from autotune.core import sequences
from autotune.core.host import worker_init
from autotune.core.stages import Stage, run_device_stages
from autotune.core.training import AMP_DTYPES, compile_model


class OwnLoop:
    """The calls of a hand-written loop (mixed into ``Runtime``, which sets the attributes)."""

    knobs: dict[str, Any]
    device: torch.device
    stages: list[Stage]

    def _override(self, knob: str, have: Any, want: Any, where: str) -> None:
        raise NotImplementedError  # Runtime's: one KnobOverridden warning per knob

    def worker_init_fn(self, then: Callable[[int], Any] | None = None) -> Callable[[int], Any] | None:
        """The DataLoader's ``worker_init_fn``: each worker's torch threads as the trials'
        workers had them, then ``then`` (yours) if given; ``then`` itself where no worker
        threads were measured (no workers, or no ``cpu_threads`` knob)."""
        return worker_init(self.knobs, then)

    def compile(self, model: nn.Module) -> Callable[..., Any]:
        """What the loop calls for the forward: ``torch.compile(model, mode=...)`` as measured,
        or ``model`` itself (compile=off, or already compiled). Keep ``model`` for
        ``state_dict()``, evaluation and checkpoints."""
        return compile_model(model, self.knobs)

    def to_device(self, inputs: Any, targets: Any = None, *,
                  device_transform: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
        """A batch's inputs and targets on the device (any nesting of tensors), as the trial's
        step had them: the copy (``non_blocking`` as measured), the input stages that
        ``transform_split`` put on the device (given to ``rt.dataloader(stages=)``), your
        ``device_transform`` where the study sent uint8 (``transfer_dtype``), and 4-D inputs
        in ``channels_last`` where measured."""
        non_blocking = bool(self.knobs["non_blocking"])
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

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward and the loss under the measured mixed precision
        (``torch.autocast(device, dtype)``, disabled for amp=off) and SDPA's pinned backend
        (the ``attention`` knob's ``sdpa_*`` values). Run the backward outside it, as
        PyTorch's AMP recipe does (with activation checkpointing and a pinned backend, inside
        ``rt.attention_backend()``: the recomputed forward needs the same backend)."""
        self._no_graph_here()
        dtype = AMP_DTYPES.get(str(self.knobs["amp"]))
        with torch.autocast(self.device.type, dtype=dtype or torch.float32,
                            enabled=dtype is not None), sequences.attention_backend(self.knobs):
            yield

    def attention_backend(self) -> contextlib.AbstractContextManager[None]:
        """SDPA restricted to the measured backend (``torch.nn.attention.sdpa_kernel``), or
        nothing: for a backward that recomputes checkpointed layers."""
        return sequences.attention_backend(self.knobs)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """``torch.amp.GradScaler`` for amp=fp16; otherwise a disabled one, whose
        ``scale``/``unscale_``/``step``/``update`` pass straight through, so the loop's lines
        are the same for every precision (bf16 has fp32's range and needs no scaling)."""
        return torch.amp.GradScaler(self.device.type, enabled=self.knobs["amp"] == "fp16")

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.zero_grad(set_to_none=...)`` as measured: freed (None) or zeroed in
        place."""
        optimizer.zero_grad(set_to_none=bool(self.knobs["set_to_none"]))

    def _no_graph_here(self) -> None:
        """A whole-step CUDA Graph is captured by ``rt.wrap(...).step()`` only: a loop of its
        own runs without it, and is told once (tune with knobs.cuda_graphs=false for one)."""
        if self.knobs.get("cuda_graphs"):
            self._override("cuda_graphs", False, True, "a loop of your own (only "
                           "rt.wrap(model, optimizer, loss_fn, loader=...).step() captures the "
                           "whole step in a CUDA Graph)")
