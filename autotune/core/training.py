"""Applying knobs to a real training loop: the one place both trials and production runs use
(the process-wide knobs, which set the process rather than a loader or a model: host.py).

``Training(workload, knobs, device)`` builds the loader, model and optimizer with the knobs
applied and exposes the step in phases (copy, forward+backward, optimizer) so the window can
time each one. A production run with its own loader, model and optimizer gets the same step
through ``autotune.Runtime`` (``Training.around`` and the functions below); one built from a
``Workload`` uses the same object::

    best = autotune.load_best("studies/resnet18-cuda/best.yaml")
    run = autotune.Training(my_workload, best.knobs, "cuda")
    for batch in run.loader:
        loss = run.step(*run.to_device(*run.split(batch)))

Batches may be pairs or Mappings of any nesting (``autotune.core.batch``); every knob that touches
a batch walks its structure.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import nvtx
import torch
from torch.utils.data import DataLoader

from autotune.core import batch as tree
from autotune.core import distributed, llm_kernels, sequences, sharding
from autotune.core.host import apply_process_knobs, worker_init
from autotune.core.optimizer_impl import named_optimizer, optimizer_kwargs
from autotune.core.stages import StagedDataset, check_split, collate_for, run_device_stages
from autotune.core.workload import Workload, build_optimizer

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """An NVTX range (seen by ``nsys profile``) that is also a torch.profiler label."""
    with nvtx.annotate(name, domain="autotune"), torch.profiler.record_function(name):
        yield


def loader_kwargs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The DataLoader arguments the loader knobs decide (batch size, workers, pinning,
    prefetch, persistence): the trial's loader and a production loader get the same ones."""
    workers = int(knobs["num_workers"])
    kwargs: dict[str, Any] = {
        "batch_size": int(knobs["batch_size"]),
        "num_workers": workers,
        "pin_memory": bool(knobs["pin_memory"]),
    }
    if workers > 0:  # DataLoader refuses these without workers
        kwargs["prefetch_factor"] = int(knobs["prefetch_factor"] or 2)
        kwargs["persistent_workers"] = bool(knobs["persistent_workers"])
    return kwargs


def with_padding(collate: Any, knobs: Mapping[str, Any]) -> Any:
    """The collate function with the ``pad_to_multiple_of`` knob set (a copy: a padding
    collator, e.g. transformers' DataCollatorWithPadding, pads each batch to its longest
    sequence rounded up to that multiple); unchanged when the knob is unset or the collator
    has no such setting."""
    pad = knobs.get("pad_to_multiple_of")
    inner = sequences.unwrapped(collate)  # the Trainer's column-removing wrapper looked through
    if pad is None or not hasattr(inner, "pad_to_multiple_of") or inner.pad_to_multiple_of == pad:
        return collate
    padded = copy.copy(inner)
    padded.pad_to_multiple_of = int(pad)
    return sequences.rewrapped(collate, padded)


def input_dataset(workload: Workload, knobs: Mapping[str, Any]) -> tuple[Any, Any]:
    """The loader's dataset and collate_fn: a staged workload's source with its first
    ``transform_split`` stages run per sample on the host (the rest run in ``prepare``), else
    the workload's own ``dataset(transfer_dtype)``."""
    stages = workload.stages()
    if not stages:
        collate = sequences.collator(with_padding(workload.collate_fn(), knobs), knobs)
        return workload.dataset(knobs["transfer_dtype"]), collate
    split = int(knobs.get("transform_split", len(stages)))
    check_split(stages, split)
    return (StagedDataset(workload.raw_dataset(), stages[:split]),
            collate_for(stages, split) or workload.collate_fn())


def build_loader(workload: Workload, knobs: Mapping[str, Any], seed: int = 0,
                 cores: int | None = None) -> DataLoader:
    """The trial's loader. ``cores``: the cores the workers' threads are shared out of
    (default: this process's usable CPUs)."""
    dataset, collate = input_dataset(workload, knobs)
    # Several ranks: each reads its own part of every epoch, as DDP training does.
    order: dict[str, Any] = ({"sampler": distributed.sampler(dataset, seed)}
                             if distributed.world_size() > 1 else
                             {"sampler": sequences.grouped_sampler(
                                 dataset, int(knobs["batch_size"]), seed, workload.sample_lengths())}
                             if knobs.get("length_grouping") else
                             {"shuffle": True, "generator": torch.Generator().manual_seed(seed)})
    return DataLoader(
        dataset,
        drop_last=True,  # static shapes: a short last batch would recompile / break a graph
        collate_fn=collate,
        worker_init_fn=worker_init(knobs, cores=cores),
        **order,
        **loader_kwargs(knobs),
    )


def place_model(model: torch.nn.Module, knobs: Mapping[str, Any], device: torch.device,
                checkpoint_layers: tuple[type, ...] = ()) -> torch.nn.Module:
    """The model on its device, in the knobs' memory format, in training mode, with its
    attention implementation, Liger's kernels and activation checkpointing as the knobs say
    (Liger first, as the Trainer patches it before it enables checkpointing)."""
    llm_kernels.apply_liger(model, knobs)
    sequences.prepare_model(model, knobs, checkpoint_layers)
    model = model.to(device)
    if bool(knobs["channels_last"]):
        model = model.to(memory_format=torch.channels_last)
    model.train()
    return model


def compile_model(model: torch.nn.Module, knobs: Mapping[str, Any]) -> Callable[..., Any]:
    """The module the step calls: the model itself (compile=off) or its torch.compile wrapper
    in the chosen mode (lazy: nothing compiles before the first call)."""
    mode = knobs["compile"]
    if mode == "off" or isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
        return model  # already compiled by the user's code: used as it is (runtime.py warns)
    return torch.compile(model, mode=None if mode == "default" else mode)


def grad_scaler(knobs: Mapping[str, Any], device: torch.device) -> torch.amp.GradScaler | None:
    """fp16 autocast needs a GradScaler (bf16 has fp32's range and needs none)."""
    return torch.amp.GradScaler(device.type) if knobs["amp"] == "fp16" else None


class CaptureFailed(RuntimeError):
    """CUDA Graph capture of the step failed (a sync, a CPU op or a dynamic shape in it)."""


class Training:
    """A training step with every knob applied. Not thread-safe; one per process."""

    def __init__(
        self, workload: Workload, knobs: Mapping[str, Any], device: str | torch.device, seed: int = 0,
        grad_accum: int = 1,
    ):
        """``grad_accum`` > 1: each step is one micro-batch, gradients add up over that many and
        the optimizer steps once per ``grad_accum * batch_size`` samples (the global batch)."""
        self.workload = workload
        self.grad_accum = int(grad_accum)
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum={grad_accum}: must be a positive integer")
        self._micro = 0  # micro-batches done in the current accumulation cycle
        self.knobs = dict(knobs)
        self.device = torch.device(device)
        torch.manual_seed(seed)
        apply_process_knobs(self.knobs)
        self.loader: Any = build_loader(workload, self.knobs, seed)
        model = place_model(workload.model(), self.knobs, self.device, workload.checkpoint_layers)
        if distributed.world_size() > 1 or (sharding.sharded(self.knobs)
                                            and torch.distributed.is_initialized()):
            # Several ranks (a trial launched as the production run is): DDP or FSDP2 as the
            # knobs say, before the optimizer, whose parameters a sharded model replaces (a
            # sharded model also on a process group of one rank: one GPU's check).
            model = distributed.wrap(model, self.knobs, self.device,
                                     workload.ddp_arguments(model, self.knobs),
                                     workload.shard_layers or workload.checkpoint_layers)
        self._attach(model, build_optimizer(workload, model, **optimizer_kwargs(self.knobs),
                                            **named_optimizer(self.knobs)))

    @classmethod
    def around(cls, workload: Workload, knobs: Mapping[str, Any], device: str | torch.device,
               model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               loader: Any = None, grad_accum: int = 1) -> Training:
        """The same step around objects the user built (autotune/production/runtime.py): their model
        (already placed with ``place_model``), optimizer and loader; nothing is rebuilt.
        The process-wide knobs are the caller's to apply (once per process: host.py)."""
        self = cls.__new__(cls)
        self.workload = workload
        self.grad_accum = int(grad_accum)
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum={grad_accum}: must be a positive integer")
        self._micro = 0
        self.knobs = dict(knobs)
        self.device = torch.device(device)
        self.loader = loader
        self._attach(model, optimizer)  # the user's model is in DDP or sharded already, or not
        return self

    def _attach(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Every per-step knob, set up around a placed model (in DDP or sharded where several
        ranks run) and its optimizer."""
        self.channels_last = bool(self.knobs["channels_last"])
        self.uint8 = self.knobs["transfer_dtype"] == "uint8"
        stages = self.workload.stages()  # the device part of a staged input pipeline
        self.device_stages = stages[int(self.knobs.get("transform_split", len(stages))):]
        # decode_jpeg(device=cuda) reads host bytes itself: that batch is not copied first.
        self.copy_inputs = not (self.device_stages and self.device_stages[0].host_input)
        self.non_blocking = bool(self.knobs["non_blocking"])
        self.set_to_none = bool(self.knobs["set_to_none"])
        ddp_type = torch.nn.parallel.DistributedDataParallel
        self.ddp = model if isinstance(model, ddp_type) else None
        #: The sharded model (FSDP2's ``FSDPModule``), where the ranks shard it.
        self.fsdp = model if sharding.fsdp_modules(model)[:1] == [model] else None
        self.model = self.ddp.module if self.ddp is not None else model
        self.optimizer = optimizer
        #: The workload's gradient clipping (``Workload.max_grad_norm``), applied in
        #: ``clip_gradients``; None: none.
        self.max_grad_norm: float | None = getattr(self.workload, "max_grad_norm", None)
        #: Clipping each gradient element instead (``Workload.clip_grad_value``: Lightning's
        #: gradient_clip_algorithm="value"); None: none.
        self.clip_grad_value: float | None = getattr(self.workload, "clip_grad_value", None)
        self.amp_dtype = AMP_DTYPES.get(self.knobs["amp"])
        self.scaler = grad_scaler(self.knobs, self.device)
        # sync_grads=False: the window's counterfactual, the step without gradient
        # communication (DDP's no_sync; a sharded model's every parameter gathered beforehand:
        # measure/comm.py).
        self.sync_grads = True
        # the model (or its DDP wrapper), or its compiled wrapper
        self.forward_module: Callable[..., Any] = compile_model(model, self.knobs)
        self.graph: _GraphedStep | None = None
        if self.knobs["cuda_graphs"]:
            if self.device.type != "cuda":
                raise ValueError("cuda_graphs=True needs a CUDA device")
            if self.grad_accum > 1:
                raise CaptureFailed("cuda_graphs=True captures the whole optimizer step: it "
                                    f"cannot accumulate gradients (grad_accum={self.grad_accum})")
            if self.device_stages and self.device_stages[0].ragged:
                raise CaptureFailed(
                    f"cuda_graphs=True with transform_split={self.knobs['transform_split']}: the "
                    f"device stage {self.device_stages[0].name!r} takes inputs of varying "
                    "shapes (a list), which a captured graph cannot replay")
            try:
                self.graph = _GraphedStep(self)
            except torch.OutOfMemoryError:
                raise
            except RuntimeError as exc:
                raise CaptureFailed(f"CUDA Graph capture failed: {exc}") from exc

    # --- the step, in the phases the window times -------------------------------------------
    def split(self, batch: Any) -> tuple[Any, Any]:
        """``(inputs, targets)`` of one loader batch, by the workload's convention."""
        return self.workload.split_batch(batch)

    def to_device(self, inputs: Any, targets: Any) -> tuple[Any, Any]:
        """Both sides on the device, whatever their structure (targets may be None)."""
        with phase("copy"):
            if self.copy_inputs:  # not when decode_jpeg(device=) reads the host bytes itself
                inputs = tree.move(inputs, self.device, self.non_blocking)
            targets = tree.move(targets, self.device, self.non_blocking)
        return inputs, targets

    def prepare(self, inputs: Any) -> Any:
        """Device half of the input transform (given the whole inputs structure): the
        staged workload's device stages, or the two-way split's ``device_transform``; then the
        model's memory format for every 4-D tensor inside it."""
        if self.device_stages:
            # A phase of its own: the diagnosis tells the input stages' syncs (decode_jpeg on a
            # GPU copies each image's host bytes in) from the training code's.
            with phase("stages"):
                inputs = run_device_stages(self.device_stages, inputs, self.device)
        if self.uint8:
            inputs = self.workload.device_transform(inputs)
        if self.channels_last:
            inputs = tree.channels_last(inputs)
        return inputs

    def compute_loss(self, inputs: Any, targets: Any) -> torch.Tensor:
        """The forward pass under autocast: the model called by the batch convention, then the
        workload's loss (by default the model's own ``.loss``)."""
        with torch.autocast(
            self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None
        ), sequences.attention_backend(self.knobs):
            return self.workload.loss(tree.call_model(self.forward_module, self.prepare(inputs)),
                                      targets)

    def forward_backward(self, inputs: Any, targets: Any) -> torch.Tensor:
        """One micro-batch's forward and backward; gradients are cleared only at the start of
        an accumulation cycle and each micro-batch's loss is divided by the cycle's length, so
        the optimizer sees the mean gradient over the global batch."""
        if self._micro == 0:
            self.optimizer.zero_grad(set_to_none=self.set_to_none)
        unsynced = self.ddp.no_sync() if self.ddp is not None and not self._syncs() \
            else contextlib.nullcontext()
        if self.fsdp is not None and self.knobs.get("accumulation_no_sync") and self.sync_grads:
            sharding.micro_step(self.fsdp, last=self._micro == self.grad_accum - 1)
        with unsynced:
            with phase("forward"):
                loss = self.compute_loss(inputs, targets)
            # Checkpointed layers run their forward again in backward: under the same backend.
            with phase("backward"), sequences.attention_backend(self.knobs):
                scaled = loss / self.grad_accum if self.grad_accum > 1 else loss
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def _syncs(self) -> bool:
        """Whether this micro-batch's backward all-reduces its gradients: not in the window's
        counterfactual (``sync_grads``), and with ``accumulation_no_sync`` only on the last
        micro-batch of an accumulation cycle (the gradients add up locally until then)."""
        if not self.sync_grads:
            return False
        return not (self.knobs.get("accumulation_no_sync") and self._micro < self.grad_accum - 1)

    @property
    def at_cycle_edge(self) -> bool:
        """Whether the next micro-batch starts an accumulation cycle (always, without
        accumulation): a window of whole cycles times each optimizer step once per cycle."""
        return self._micro == 0

    def optimizer_step(self) -> None:
        """Step the optimizer once the accumulation cycle is complete (every call when
        grad_accum is 1)."""
        self._micro += 1
        if self._micro < self.grad_accum:
            return
        self._micro = 0
        with phase("optimizer"):
            self.clip_gradients()
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()

    def clip_gradients(self) -> None:
        """The gradients' total norm clipped to ``max_grad_norm``, on the true gradients:
        GradScaler's unscale first, then the clip, then (the caller's) step, as PyTorch's AMP
        recipe orders them and the Hugging Face Trainer does (accelerate's ``clip_grad_norm_``
        unscales first). A fused optimizer unscales inside its own step, after any pre-step
        hook, so a clip there would read the scaled norm (loss-scale times the true one); once
        ``unscale_`` ran, ``scaler.step`` tells the optimizer the gradients are unscaled."""
        if not (self.max_grad_norm or self.clip_grad_value):
            return
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.max_grad_norm))
        else:
            torch.nn.utils.clip_grad_value_(self.model.parameters(), float(self.clip_grad_value or 0))

    def step(self, inputs: Any, targets: Any) -> torch.Tensor:
        """One whole training step on device-resident inputs; returns the (device) loss."""
        if self.graph is not None:
            return self.graph.replay(inputs, targets)
        loss = self.forward_backward(inputs, targets)
        self.optimizer_step()
        return loss


class _GraphedStep:
    """Whole-step CUDA Graph capture (PyTorch's "whole network capture" recipe): forward,
    backward and optimizer.step recorded once on static tensors, then replayed per batch.
    Removes per-kernel launch overhead; needs static shapes and no host syncs in the step."""

    def __init__(self, run: Training, warmup: int = 3):
        self.run = run
        for group in run.optimizer.param_groups:
            if "capturable" in group:  # Adam-style step counters must live on the device
                group["capturable"] = True
        inputs, targets = run.split(next(iter(run.loader)))
        # Static copies of every tensor leaf; replay copies each new batch into them.
        self.static_inputs = tree.static_copy(tree.move(inputs, run.device))
        self.static_targets = tree.static_copy(tree.move(targets, run.device))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
            for _ in range(warmup):
                run.forward_backward(self.static_inputs, self.static_targets)
                run.clip_gradients()
                run.optimizer.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        run.optimizer.zero_grad(set_to_none=True)
        # thread_local: the DataLoader's pin-memory thread goes on allocating pinned buffers
        # and querying events while we capture; in the default "global" mode any such call
        # from another thread invalidates the capture.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            with torch.autocast(
                "cuda", dtype=run.amp_dtype or torch.float32, enabled=run.amp_dtype is not None,
                cache_enabled=False,
            ), sequences.attention_backend(run.knobs):
                out = tree.call_model(run.forward_module, run.prepare(self.static_inputs))
                self.static_loss = run.workload.loss(out, self.static_targets)
            with sequences.attention_backend(run.knobs):  # a checkpointed layer's recompute
                self.static_loss.backward()
            run.clip_gradients()  # captured too: no host sync in it
            run.optimizer.step()

    def replay(self, inputs: Any, targets: Any) -> torch.Tensor:
        with phase("graph_replay"):
            tree.copy_into(self.static_inputs, inputs)
            tree.copy_into(self.static_targets, targets)
            self.graph.replay()
        return self.static_loss.detach().clone()
