"""best.yaml's ``fsdp_kwargs`` and ``sharding`` sections: the FSDP2 arguments a sharded
configuration ran with, as the installed torch's ``fully_shard`` names them, and what sharding
bought against replicated ranks (DDP) in this study's measurements."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.core.sharding import mesh_shape, mp_dtypes, sharded
from autotune.results.record import trial_attrs
from autotune.results.trials import feasible, measured, over_limit, rate


def fsdp_section(launch: Mapping[str, Any] | None, knobs: Mapping[str, Any],
                 comm: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """``fully_shard``'s arguments for each block group and the root (None: not sharded), as
    this torch's signature has them, with what a script needs besides: the mesh's shape and
    dimension names, the blocks (their types, as the trial's ranks found them: ``comm``) and
    how many go in a group, the prefetch depth, and accumulation's micro-step flags."""
    if not launch or not sharded(knobs):
        return None
    from torch.distributed.fsdp import fully_shard

    param, reduce = mp_dtypes(knobs)
    args: dict[str, Any] = {
        "reshard_after_forward": knobs.get("sharding") != "shard_grad_op",
        "mp_policy": {"param_dtype": _dtype(param), "reduce_dtype": _dtype(reduce)},
        "offload_policy": "CPUOffloadPolicy" if knobs.get("fsdp_cpu_offload") else None,
    }
    accepted = inspect.signature(fully_shard).parameters
    nproc = int(launch.get("nproc_per_node", 1))
    world = nproc * int(launch.get("nnodes", 1))
    shape = list(mesh_shape(knobs, world, nproc))
    return {**{k: v for k, v in args.items() if k in accepted},
            "mesh_shape": shape,
            "mesh_dim_names": ["replicate", "shard"] if len(shape) == 2 else ["shard"],
            "block_types": list((comm or {}).get("block_types") or []),
            "blocks_per_group": int(knobs.get("fsdp_wrap_blocks") or 1),
            "prefetch": int(knobs.get("fsdp_prefetch") or 0),
            # On an accumulation cycle's micro-batches but its last (accumulation_no_sync):
            # model.set_requires_gradient_sync(False); model.set_reshard_after_backward(False).
            "accumulation_no_sync": bool(knobs.get("accumulation_no_sync", False))}


def _dtype(dtype: Any) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def sharding_words(trials: Sequence[FrozenTrial], chosen: FrozenTrial,
                   limit_gb: float | None) -> str | None:
    """What sharding bought in this study, from its measured trials (None where they all ran
    one sharding): the chosen sharded configuration's memory per rank against the replicated
    (no_shard) trials' at its batch size, or the chosen replicated one's speed against the
    fastest sharded configuration that fits."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and measured(t)]
    kinds = {_knobs(t).get("sharding", "no_shard") for t in done}
    if len(kinds) < 2:
        return None
    mine = _knobs(chosen)
    batch = mine.get("batch_size")
    peak = float(trial_attrs(chosen).get("peak_memory_gb") or 0.0)
    if sharded(mine):
        same = [t for t in done if not sharded(_knobs(t)) and _knobs(t).get("batch_size") == batch]
        if not same:
            return (f"{mine['sharding']} fits batch {batch} in {peak:.2f} GB per rank; no "
                    f"no_shard trial ran batch {batch}")
        least = min(same, key=lambda t: float(trial_attrs(t).get("peak_memory_gb") or 0.0))
        need = float(trial_attrs(least).get("peak_memory_gb") or 0.0)
        over = (f", over the {limit_gb:.2f} GB limit" if limit_gb and all(over_limit(t) for t in same)
                else "")
        return (f"{mine['sharding']} fits batch {batch} in {peak:.2f} GB per rank where no_shard "
                f"needed {need:.2f} GB (trial {least.number}, the least of {len(same)}{over})")
    fits = [t for t in done if sharded(_knobs(t)) and feasible(t)]
    if not fits:
        return "no sharded configuration fit the memory limit"
    fast = max(fits, key=lambda t: rate(trial_attrs(t)))
    theirs = float(trial_attrs(fast).get("peak_memory_gb") or 0.0)
    speed = rate(trial_attrs(chosen)) / max(rate(trial_attrs(fast)), 1e-12)
    return (f"no_shard (DDP) ran {speed:.2f}x the fastest sharded configuration (trial "
            f"{fast.number}, {_knobs(fast)['sharding']}, {theirs:.2f} GB per rank against "
            f"{peak:.2f} GB; search windows)")


def _knobs(t: FrozenTrial) -> dict[str, Any]:
    return dict(trial_attrs(t).get("knobs") or {})
