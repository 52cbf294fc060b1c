"""Applying the distributed knobs: the rank's share of the node's cores, the model's wrapper
for its parallelism (DDP here, FSDP2 in core/sharding.py) and the sampler that splits the data
over the ranks.

The one place a trial's ranks and a production run launched by ``torchrun`` take them from
(``Training`` and ``autotune.Runtime.ddp``), so a measured configuration is the one that runs.

Under ``torchrun --nproc_per_node=N`` every rank of a node runs the same command, with the same
``num_workers`` and threads: a study of one process that owned the node exported
``num_workers=2, cpu_threads=2``, and two ranks with those ran 2.1x slower than with one worker
and one thread each on this project's 2-core VM (2026-11-26). So each local rank gets a disjoint
share of the usable cores (``rank_cores``), pinned where the OS allows it, and its knobs are
searched within that share.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: The DDP knobs, as DistributedDataParallel's arguments of the same names (``broadcast_buffers``
#: is ``forward_sync_buffers`` from torch 2.14 on, where the old name is deprecated;
#: ``batched_grad_copy`` exists from 2.14 on). ``comm_hook`` is registered on the wrapper and
#: ``accumulation_no_sync`` decides the step's ``no_sync`` (core/training.py): not arguments.
DDP_KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "batched_grad_copy", "static_graph",
             "broadcast_buffers", "comm_hook", "accumulation_no_sync")

#: ``comm_hook`` values and the hooks torch ships for them: gradients all-reduced in half
#: precision (half the bytes; their sum rounded to 11 or 8 mantissa bits: numerics change).
COMM_HOOKS = {
    "fp16": "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook",
    "bf16": "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook",
}


def world_size() -> int:
    """Ranks in the running process group (1 when there is none)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank_cores(local_rank: int, local_world: int, cores: list[int] | None = None) -> list[int]:
    """This local rank's share of the usable cores: consecutive, disjoint, as even as the count
    allows (3 cores over 2 ranks: 2 and 1); every rank keeps at least one core, shared when
    there are fewer cores than ranks."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if local_world <= 1:
        return cores
    if len(cores) < local_world:
        return [cores[local_rank % len(cores)]]
    base, extra = divmod(len(cores), local_world)
    start = local_rank * base + min(local_rank, extra)
    return cores[start:start + base + (1 if local_rank < extra else 0)]


def pin_rank(local_rank: int, local_world: int) -> list[int]:
    """Pin this process (and the loader workers it starts later) to its share of the cores,
    and cap OpenMP at the share, as ``torchrun`` caps it at 1 for N > 1 ranks; returns the
    share. Where the OS has no affinity call, nothing is pinned."""
    try:
        share = rank_cores(local_rank, local_world)
        os.sched_setaffinity(0, share)
    except (AttributeError, OSError):
        return []
    os.environ["OMP_NUM_THREADS"] = str(len(share))
    return share


def endpoint_taken(endpoint: str) -> str | None:
    """Why a one-node rendezvous cannot listen on ``host:port`` (another process holds the
    port; the host is not this machine), None when it can. Checked before the ranks start:
    torch's c10d store would otherwise retry the port until the trial's stall limit."""
    import socket

    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        return f"{endpoint!r} is not host:port"
    if int(port) == 0:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As the c10d store binds: the last window's closed connections (TIME_WAIT) do
            # not hold the port, a listener does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, int(port)))
    except OSError as exc:
        return f"{endpoint} cannot be listened on here ({exc.strerror or exc})"
    return None


def ddp_kwargs(knobs: Mapping[str, Any], torch_version: str | None = None) -> dict[str, Any]:
    """DistributedDataParallel's arguments for these knobs, named as this torch names them
    (``torch_version``: another torch's names, for an export; default: the running one). An
    argument that torch lacks is left out (it was fixed off there: domains.batched_grad_copy)."""
    kwargs: dict[str, Any] = {
        "bucket_cap_mb": int(knobs.get("bucket_cap_mb") or 25),
        "gradient_as_bucket_view": bool(knobs.get("gradient_as_bucket_view", False)),
        "static_graph": bool(knobs.get("static_graph", False)),
    }
    if has_ddp_argument("batched_grad_copy", torch_version):
        kwargs["batched_grad_copy"] = bool(knobs.get("batched_grad_copy", False))
    sync = bool(knobs.get("broadcast_buffers", True))
    new = has_ddp_argument("forward_sync_buffers", torch_version)
    kwargs["forward_sync_buffers" if new else "broadcast_buffers"] = sync
    return kwargs


#: The torch release that added each DDP argument the knobs use (for an export to another torch).
_ADDED_IN = {"forward_sync_buffers": (2, 14), "batched_grad_copy": (2, 14)}


def has_ddp_argument(name: str, torch_version: str | None = None) -> bool:
    """Whether DistributedDataParallel takes ``name``: the running torch's signature, or by
    release for another torch's version string."""
    if torch_version is None:
        from torch.nn.parallel import DistributedDataParallel

        return name in inspect.signature(DistributedDataParallel).parameters
    major, minor = (int(x) for x in torch_version.split("+")[0].split(".")[:2])
    return (major, minor) >= _ADDED_IN[name]


def comm_hook(name: str | None) -> Any:
    """The hook function for a ``comm_hook`` value (None for "none": DDP's own all-reduce)."""
    if not name or name == "none":
        return None
    import importlib

    module, _, attr = COMM_HOOKS[name].rpartition(".")
    return getattr(importlib.import_module(module), attr)


def wrap(model: torch.nn.Module, knobs: Mapping[str, Any], device: torch.device,
         extra: Mapping[str, Any] | None = None,
         layers: Sequence[type] = ()) -> torch.nn.Module:
    """The model wrapped for its parallelism, as the knobs say: sharded in place with FSDP2
    (``sharding`` other than no_shard: core/sharding.py, ``layers`` naming its blocks), else
    in DDP with the knobs' arguments and communication hook, on CUDA on this rank's device
    (``extra``: arguments the workload's framework adds, Workload.ddp_arguments: the Hugging
    Face Trainer's find_unused_parameters). Build the optimizer from the returned module's
    parameters: a sharded model's are its shards."""
    from autotune.core import sharding

    if sharding.sharded(knobs):
        return sharding.shard(model, knobs, device, layers)
    return ddp(model, knobs, device, extra)


def ddp(model: torch.nn.Module, knobs: Mapping[str, Any], device: torch.device,
        extra: Mapping[str, Any] | None = None) -> torch.nn.parallel.DistributedDataParallel:
    """The model in DDP with the knobs' arguments and communication hook."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids, **ddp_kwargs(knobs), **dict(extra or {}))
    hook = comm_hook(knobs.get("comm_hook"))
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    return ddp


def sampler(dataset: Any, seed: int) -> Any:
    """The sampler that gives each rank its part of every epoch (shuffled alike on all ranks
    from ``seed``; ``set_epoch`` reshuffles): DDP's counterpart of ``shuffle=True``."""
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(dataset, shuffle=True, seed=seed, drop_last=True)
