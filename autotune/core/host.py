"""The knobs that set the training process itself (and its DataLoader workers), not a model or
a loader: TF32 and cuDNN autotuning, glibc's allocator, torch's threads. Process-wide and
one-way, so a trial sets them in its fresh process, and a production run once, before its
DataLoader forks its workers: ``apply_process_knobs`` is that one call, for Training, the
runtime API and the adapters alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from autotune.core.env import usable_cpus


def apply_process_knobs(knobs: Mapping[str, Any]) -> None:
    """Every process-wide knob, in this process: backend flags, host allocator, threads."""
    apply_backend_flags(knobs)
    apply_cuda_allocator(knobs)
    apply_host_allocator(knobs)
    apply_cpu_threads(knobs)


def apply_backend_flags(knobs: Mapping[str, Any]) -> None:
    """Process-wide switches: TF32 matmuls and cuDNN autotuning.

    cuDNN convolutions already use TF32 by PyTorch's default (``cudnn.allow_tf32=True``) and
    are left so: switching them off for ``tf32=False`` would make the baseline slower than the
    user's real setup and overstate every speedup. The knob decides fp32 matmuls, which
    PyTorch keeps in full fp32 by default."""
    torch.backends.cuda.matmul.allow_tf32 = bool(knobs["tf32"])
    torch.backends.cudnn.benchmark = bool(knobs["cudnn_benchmark"])


#: The CUDA caching allocator's configuration variable (torch 2.9 reads PYTORCH_ALLOC_CONF
#: too; this older name is read by every torch the project supports).
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def expandable_in_env() -> bool:
    conf = os.environ.get(ALLOC_CONF) or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    return EXPANDABLE.lower() in conf.replace(" ", "").lower()


def apply_cuda_allocator(knobs: Mapping[str, Any]) -> None:
    """expandable_segments=True: set in the environment (for the processes this one starts: a
    launched rank, a compile worker) and in this process's allocator, before or after CUDA
    started (a notebook that trained before). Without it each block
    size gets segments of its own, and batches whose shapes vary leave reserved memory that no
    later size fits: the peak the memory limit reads grows. False leaves the user's own
    setting as it is."""
    if not knobs.get("expandable_segments") or expandable_in_env():
        return
    conf = os.environ.get(ALLOC_CONF)
    os.environ[ALLOC_CONF] = f"{conf},{EXPANDABLE}" if conf else EXPANDABLE
    if torch.cuda.is_available():
        # The variable is read once, whenever torch first parses its allocator settings (at
        # import in some versions): no public API sets it later. This private one is what
        # torch's own tests use; segments made after it follow it.
        torch.cuda.memory._set_allocator_settings(EXPANDABLE)


# glibc mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
#: host_allocator=release: blocks from this size up are mmapped and unmapped on free.
RELEASE_MMAP_THRESHOLD = 64 * 1024


def apply_host_allocator(knobs: Mapping[str, Any]) -> None:
    """host_allocator=retain: glibc serves blocks above its mmap threshold (up to 32 MiB) with
    fresh mmaps and unmaps them on free, so a CPU step that frees and re-allocates its
    activations faults every page back in and zeroes it, every step. With mmap off and no heap
    trimming, freed memory stays in the process for reuse.

    host_allocator=release: the opposite. By default glibc raises its mmap threshold to the
    size of each mmapped block freed (up to 32 MiB), so blocks of that size come from the heap
    afterwards and stay resident when freed: a sharded rank's gathered parameters, freed after
    each block, then read as resident memory as if never freed (2 ranks of a 67M-parameter
    Llama, AdamW: FSDP2's peak read as DDP's, docs/benchmarks.md). A fixed 64 KiB threshold
    and trimming the heap's top at once give every freed block back: the resident memory is
    what the process uses. Process-wide and one-way (set it before the loader forks its
    workers); a fresh trial process per configuration."""
    choice = knobs.get("host_allocator", "default")
    if choice not in ("retain", "release"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
          if choice == "retain" else
          libc.mallopt(M_MMAP_THRESHOLD, RELEASE_MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, 0))
    if not ok:
        raise RuntimeError(f"host_allocator={choice}: glibc mallopt refused the settings")


def process_threads(knobs: Mapping[str, Any], cores: int) -> int | None:
    """The training process's torch threads: the ``cpu_threads`` count; 0 = the cores its
    DataLoader workers leave free (at least 1); None (a best.yaml from before the knob) =
    torch's own default, left alone."""
    n = knobs.get("cpu_threads")
    if n is None:
        return None
    return int(n) if int(n) > 0 else max(1, cores - int(knobs.get("num_workers") or 0))


def worker_threads(knobs: Mapping[str, Any], cores: int) -> int | None:
    """Each DataLoader worker's torch threads: an equal share of the cores among the training
    process and its workers (``cores // (num_workers + 1)``, at least 1), and never more than
    the training process's own. torch gives every worker 1 thread (against oversubscription);
    on a 2-core machine this is 1 too, on a large one a worker running tensor transforms gets
    its share instead of one core."""
    main = process_threads(knobs, cores)
    if main is None:
        return None
    return max(1, min(main, cores // (int(knobs.get("num_workers") or 0) + 1)))


def apply_cpu_threads(knobs: Mapping[str, Any], cores: int | None = None) -> None:
    """cpu_threads in this (the training) process: intra-op threads, and inter-op threads
    where this process has not started inter-op work yet (torch allows setting them once,
    before; a trial's fresh process always can, a notebook that already trained cannot, and
    its inter-op pool matters only to ops that fork work, which a training step rarely
    does)."""
    n = process_threads(knobs, usable_cpus() if cores is None else cores)
    if n is None:
        return
    torch.set_num_threads(n)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(n)


class WorkerThreads:
    """A DataLoader ``worker_init_fn`` that sets each worker's torch threads (and then runs the
    user's own ``worker_init_fn``, if any). A class, not a closure, so that it pickles for the
    spawn and forkserver start methods."""

    def __init__(self, threads: int, then: Callable[[int], Any] | None = None):
        self.threads, self.then = int(threads), then

    def __call__(self, worker_id: int) -> None:
        torch.set_num_threads(self.threads)
        if self.then is not None:
            self.then(worker_id)


def worker_init(knobs: Mapping[str, Any], then: Callable[[int], Any] | None = None,
                cores: int | None = None) -> Callable[[int], Any] | None:
    """The ``worker_init_fn`` a loader with these knobs gets (the trials' and production's):
    ``then`` (the user's own) wrapped with the worker's threads; ``then`` as it is when the
    knob is unset."""
    n = worker_threads(knobs, usable_cpus() if cores is None else cores)
    if n is None or not int(knobs.get("num_workers") or 0):
        return then
    return WorkerThreads(n, then)
