"""Applying knobs to a real training loop: the one place both trials and production runs use.

``Training(workload, knobs, device)`` builds the loader, model and optimizer with the knobs
applied and exposes the step in phases (copy, forward+backward, optimizer) so the window can
time each one. A production run uses the same object::

    best = autotune.load_best("studies/resnet18-cuda/best.yaml")
    run = autotune.Training(my_workload, best.knobs, "cuda")
    for inputs, targets in run.loader:
        loss = run.step(*run.to_device(inputs, targets))
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import nvtx
import torch
from torch.utils.data import DataLoader

from autotune.workload import Workload

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """An NVTX range (seen by ``nsys profile``) that is also a torch.profiler label."""
    with nvtx.annotate(name, domain="autotune"), torch.profiler.record_function(name):
        yield


def apply_backend_flags(knobs: Mapping[str, Any]) -> None:
    """Process-wide switches: TF32 matmuls and cuDNN autotuning.

    cuDNN convolutions already use TF32 by PyTorch's default (``cudnn.allow_tf32=True``) and
    are left so: switching them off for ``tf32=False`` would make the baseline slower than the
    user's real setup and overstate every speedup. The knob decides fp32 matmuls, which
    PyTorch keeps in full fp32 by default."""
    torch.backends.cuda.matmul.allow_tf32 = bool(knobs["tf32"])
    torch.backends.cudnn.benchmark = bool(knobs["cudnn_benchmark"])


# glibc mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def apply_host_allocator(knobs: Mapping[str, Any]) -> None:
    """host_allocator=retain: glibc serves blocks above its mmap threshold (up to 32 MiB) with
    fresh mmaps and unmaps them on free, so a CPU step that frees and re-allocates its
    activations faults every page back in and zeroes it, every step. With mmap off and no heap
    trimming, freed memory stays in the process for reuse. Process-wide and one-way (set it
    before the loader forks its workers); a fresh trial process per configuration."""
    if knobs.get("host_allocator", "default") != "retain":
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        raise RuntimeError("host_allocator=retain: glibc mallopt refused the settings")


def build_loader(workload: Workload, knobs: Mapping[str, Any], seed: int = 0) -> DataLoader:
    workers = int(knobs["num_workers"])
    extra: dict[str, Any] = {}
    if workers > 0:
        extra["prefetch_factor"] = int(knobs["prefetch_factor"] or 2)
        extra["persistent_workers"] = bool(knobs["persistent_workers"])
    return DataLoader(
        workload.dataset(knobs["transfer_dtype"]),
        batch_size=int(knobs["batch_size"]),
        shuffle=True,
        drop_last=True,  # static shapes: a short last batch would recompile / break a graph
        num_workers=workers,
        pin_memory=bool(knobs["pin_memory"]),
        generator=torch.Generator().manual_seed(seed),
        **extra,
    )


def optimizer_kwargs(knobs: Mapping[str, Any]) -> dict[str, Any]:
    impl = knobs["optimizer_impl"]
    return {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}


class CaptureFailed(RuntimeError):
    """CUDA Graph capture of the step failed (a sync, a CPU op or a dynamic shape in it)."""


class Training:
    """A training step with every knob applied. Not thread-safe; one per process."""

    def __init__(
        self, workload: Workload, knobs: Mapping[str, Any], device: str | torch.device, seed: int = 0
    ):
        self.workload = workload
        self.knobs = dict(knobs)
        self.device = torch.device(device)
        torch.manual_seed(seed)
        apply_backend_flags(self.knobs)
        apply_host_allocator(self.knobs)
        self.loader = build_loader(workload, self.knobs, seed)
        self.channels_last = bool(self.knobs["channels_last"])
        self.uint8 = self.knobs["transfer_dtype"] == "uint8"
        self.non_blocking = bool(self.knobs["non_blocking"])
        self.set_to_none = bool(self.knobs["set_to_none"])

        model = workload.model().to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        self.model = model
        self.optimizer = workload.optimizer(model.parameters(), **optimizer_kwargs(self.knobs))

        amp = self.knobs["amp"]
        self.amp_dtype = AMP_DTYPES.get(amp)
        self.scaler = torch.amp.GradScaler(self.device.type) if amp == "fp16" else None

        mode = self.knobs["compile"]
        self.forward_module: Callable[..., Any] = (  # the model, or its compiled wrapper
            model if mode == "off" else torch.compile(model, mode=None if mode == "default" else mode)
        )
        self.graph: _GraphedStep | None = None
        if self.knobs["cuda_graphs"]:
            if self.device.type != "cuda":
                raise ValueError("cuda_graphs=True needs a CUDA device")
            try:
                self.graph = _GraphedStep(self)
            except torch.OutOfMemoryError:
                raise
            except RuntimeError as exc:
                raise CaptureFailed(f"CUDA Graph capture failed: {exc}") from exc

    # --- the step, in the phases the window times -------------------------------------------
    def to_device(self, inputs: Any, targets: Any) -> tuple[Any, Any]:
        with phase("copy"):
            inputs = inputs.to(self.device, non_blocking=self.non_blocking)
            targets = targets.to(self.device, non_blocking=self.non_blocking)
        return inputs, targets

    def prepare(self, inputs: torch.Tensor) -> torch.Tensor:
        """Device half of the input transform, then the model's memory format."""
        if self.uint8:
            inputs = self.workload.device_transform(inputs)
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs

    def forward_backward(self, inputs: Any, targets: Any) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=self.set_to_none)
        with phase("forward"):
            with torch.autocast(
                self.device.type, dtype=self.amp_dtype or torch.float32, enabled=self.amp_dtype is not None
            ):
                loss = self.workload.loss(self.forward_module(self.prepare(inputs)), targets)
        with phase("backward"):
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        with phase("optimizer"):
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()

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
        inputs, targets = next(iter(run.loader))
        self.static_inputs = inputs.to(run.device)
        self.static_targets = targets.to(run.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
            for _ in range(warmup):
                run.forward_backward(self.static_inputs, self.static_targets)
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
            ):
                out = run.forward_module(run.prepare(self.static_inputs))
                self.static_loss = run.workload.loss(out, self.static_targets)
            self.static_loss.backward()
            run.optimizer.step()

    def replay(self, inputs: Any, targets: Any) -> torch.Tensor:
        with phase("graph_replay"):
            self.static_inputs.copy_(inputs, non_blocking=True)
            self.static_targets.copy_(targets, non_blocking=True)
            self.graph.replay()
        return self.static_loss.detach().clone()
