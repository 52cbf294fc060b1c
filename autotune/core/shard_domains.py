"""The sharding knobs' domains (FSDP2 under launched ranks), and which knobs apply to sharded
or to replicated (DDP) ranks: core/domains.py's counterpart for ``sharding`` and the
``fsdp_*`` knobs of the registry (core/knobs.py); applied in core/sharding.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.core.domains import Domain, ranks_only
from autotune.core.env import Env
from autotune.core.workload import Workload


def sharding(env: Env, wl: Workload) -> Domain:
    """Replicated (DDP) or sharded (FSDP2) ranks: searched when the trials run as ranks."""
    if env.ranks <= 1:
        return Domain(["no_shard"], "one process: nothing to shard (launch.nproc_per_node=N "
                      "runs every trial as N ranks)")
    if env.device != "cuda" and wl.cpu_sharding:
        return Domain(["no_shard"], wl.cpu_sharding)
    if env.nodes > 1:
        return Domain(["no_shard", "full_shard", "shard_grad_op", "hybrid_shard"])
    return Domain(["no_shard", "full_shard", "shard_grad_op"],
                  "hybrid_shard needs several nodes (launch.nnodes > 1)")


def not_sharded(p: Mapping[str, Any]) -> str | None:
    """An FSDP2 setting: only where the model is sharded."""
    return "the model is not sharded (sharding=no_shard)" if p.get("sharding", "no_shard") \
        == "no_shard" else None


def is_sharded(p: Mapping[str, Any]) -> str | None:
    """A DDP setting: only where the model is in DDP."""
    return None if p.get("sharding", "no_shard") == "no_shard" else \
        "the model is sharded (FSDP2), not in DistributedDataParallel"


def sharded_only(values: list[Any], off: Any) -> Callable[[Env, Workload], Domain]:
    """An FSDP2 setting: searched where the trials run as ranks (then active only when the
    trial shards: ``not_sharded``)."""
    return ranks_only(values, off, "nothing to shard")


def block_count(wl: Workload) -> int | None:
    """The workload's blocks for sharding, counted on a model built on the meta device (no
    memory, no weights); None where it cannot be built there."""
    import torch

    from autotune.core.sharding import blocks

    try:
        with torch.device("meta"):
            model = wl.model()
    except Exception:  # noqa: BLE001 - a model that needs real tensors to build: unknown
        return None
    return len(blocks(model, wl.shard_layers or wl.checkpoint_layers))


def fsdp_wrap_blocks(env: Env, wl: Workload) -> Domain:
    """Blocks per fully_shard group: every block, every 2, 4... up to all of them in one."""
    if env.ranks <= 1:
        return sharded_only([1], 1)(env, wl)
    n = block_count(wl)
    if not n:
        return Domain([1], "the workload names no blocks (Workload.shard_layers, "
                      "checkpoint_layers, or a Hugging Face model's _no_split_modules)"
                      if n == 0 else "its model could not be built on the meta device to "
                      "count its blocks")
    values = [2**k for k in range(n.bit_length()) if 2**k <= n]
    return Domain(values) if len(values) > 1 else Domain([1], "the model has one block")


def fsdp_param_dtype(env: Env, wl: Workload) -> Domain:
    """The gathered parameters' dtype: bf16 where the device computes in it natively."""
    if env.ranks <= 1:
        return sharded_only(["fp32"], "fp32")(env, wl)
    if not env.bf16:
        return Domain(["fp32"], "no native bf16 here (amp's reason)")
    return Domain(["fp32", "bf16"])


def fsdp_reduce_dtype(env: Env, wl: Workload) -> Domain:
    """Opt-in: a bf16 reduce-scatter sums the gradients in bf16, which changes training."""
    if env.ranks <= 1:
        return sharded_only(["fp32"], "fp32")(env, wl)
    return Domain(["fp32"], "gradients reduced in bf16 change the numerics: list values to "
                  "search them, e.g. knobs.fsdp_reduce_dtype=[fp32,bf16]")


def fsdp_cpu_offload(env: Env, wl: Workload) -> Domain:
    """Opt-in, CUDA only: shards and the optimizer step on the host trade speed for GPU memory."""
    if env.ranks <= 1:
        return sharded_only([False], False)(env, wl)
    if env.device != "cuda":
        return Domain([False], "the model is in host memory already (offload moves a GPU's "
                      "shards to the host: CUDA only)")
    return Domain([False], "offloading the shards to the host trades much speed for GPU "
                  "memory: list values to search it, knobs.fsdp_cpu_offload=[false,true]")
