"""Applying the sharding knobs: the model in FSDP2 (``torch.distributed.fsdp.fully_shard``)
instead of DDP, for trials and production alike (``distributed.wrap`` calls ``shard``).

PyTorch's recipe (https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html, as
torchtitan applies it): ``fully_shard`` on each transformer block, bottom-up, then on the root,
over a device mesh; the optimizer is built after, from the sharded parameters. Each call is one
all-gather / reduce-scatter group: per block gives the memory saving and the overlap.

- ``sharding``: ``full_shard`` frees each block's gathered parameters after its forward and
  all-gathers them again in backward (ZeRO-3); ``shard_grad_op`` keeps them until backward
  (one all-gather less per step, more memory; ZeRO-2-like); ``hybrid_shard`` shards within a
  node and replicates across nodes (a 2-D mesh: HSDP). ``no_shard`` is DDP (distributed.py).
- ``fsdp_wrap_blocks``: blocks per group (1: every block; k: every k consecutive blocks).
- ``fsdp_param_dtype`` / ``fsdp_reduce_dtype``: ``MixedPrecisionPolicy``: the dtype of the
  gathered parameters (compute and all-gather) and of the gradient reduce-scatter. FSDP2
  reduces in the parameter dtype unless told otherwise; here the reduction stays fp32 unless
  bf16 is asked for (a bf16 sum rounds the gradients: numerics change).
- ``fsdp_prefetch``: blocks all-gathered ahead (0: FSDP2's own, one block ahead in backward;
  k: k ahead in forward and backward, ``set_modules_to_forward_prefetch`` and ``..._backward``).
- ``fsdp_cpu_offload``: ``CPUOffloadPolicy``: shards, gradients and the optimizer step on the
  host (memory for speed; CUDA only).
- ``accumulation_no_sync``: on an accumulation cycle's micro-batches but its last, no
  reduce-scatter and no reshard after backward (``set_requires_gradient_sync(False)``,
  ``set_reshard_after_backward(False)``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

#: The ``sharding`` values, by the names Hugging Face's ``fsdp`` and Lightning's strategies use.
SHARDINGS = ("no_shard", "full_shard", "shard_grad_op", "hybrid_shard")
#: ``fsdp_param_dtype`` / ``fsdp_reduce_dtype`` values and their torch dtypes (fp32: FSDP2's
#: default for parameters, None).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def sharded(knobs: Mapping[str, Any]) -> bool:
    """Whether these knobs shard the model (FSDP2) rather than replicate it (DDP)."""
    return str(knobs.get("sharding") or "no_shard") != "no_shard"


def blocks(model: nn.Module, layers: Sequence[type] = ()) -> list[nn.Module]:
    """The model's blocks, outermost first found, in registration order (a transformer's
    forward order): modules of the ``layers`` types (``Workload.shard_layers``), else those
    whose class is named in a ``_no_split_modules`` of the model or of a module inside it (a
    Hugging Face model's decoder layers, in it or in a LightningModule holding it). A block
    inside activation checkpointing's wrapper is taken with its wrapper, as torchtitan shards
    it."""
    names = {n for m in model.modules() for n in (getattr(m, "_no_split_modules", None) or ())}
    types = tuple(layers)

    def is_block(m: nn.Module) -> bool:
        inner = getattr(m, "_checkpoint_wrapped_module", m)
        # By name through the class's bases: fully_shard swaps a block's class for a subclass
        # of it (FSDPLlamaDecoderLayer), so a sharded model's blocks are still found.
        return isinstance(inner, types) if types else any(
            c.__name__ in names for c in type(inner).__mro__)

    found: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            if is_block(child):
                found.append(child)
            else:
                visit(child)

    if types or names:
        visit(model)
    return found


def groups(found: list[nn.Module], every: int) -> list[list[nn.Module]]:
    """Consecutive blocks in groups of ``every`` (the last one may be shorter)."""
    k = max(1, int(every))
    return [found[i:i + k] for i in range(0, len(found), k)]


def mesh_shape(knobs: Mapping[str, Any], world: int, local_world: int) -> tuple[int, ...]:
    """The device mesh: every rank one shard (1-D), or, for ``hybrid_shard``, nodes x local
    ranks (replicate across nodes, shard within one)."""
    if knobs.get("sharding") == "hybrid_shard" and 1 < local_world < world:
        return (world // local_world, local_world)
    return (world,)


def device_mesh(knobs: Mapping[str, Any], device: torch.device) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    world = torch.distributed.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    shape = mesh_shape(knobs, world, local)
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    return init_device_mesh(device.type, shape, mesh_dim_names=names)


def mp_dtypes(knobs: Mapping[str, Any]) -> tuple[torch.dtype | None, torch.dtype | None]:
    """``MixedPrecisionPolicy``'s (param_dtype, reduce_dtype). fp32 parameters: (None, None),
    FSDP2's default, unless a bf16 reduction was asked for; bf16 parameters reduce in fp32
    (FSDP2 would reduce in bf16) unless bf16 was asked for."""
    param = str(knobs.get("fsdp_param_dtype") or "fp32")
    reduce = str(knobs.get("fsdp_reduce_dtype") or "fp32")
    if param == "fp32":
        return None, (DTYPES[reduce] if reduce != "fp32" else None)
    return DTYPES[param], DTYPES[reduce]


def fully_shard_arguments(knobs: Mapping[str, Any], root: bool = False) -> dict[str, Any]:
    """``fully_shard``'s keyword arguments for these knobs (the mesh apart). The root's
    ``reshard_after_forward`` under ``full_shard`` is left unset: FSDP2 then keeps the root's
    parameters after forward, since backward gathers them again at once (set explicitly, the
    root would reshard and gather again)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    param, reduce = mp_dtypes(knobs)
    after = knobs.get("sharding") != "shard_grad_op"
    return {"reshard_after_forward": None if after and root else after,
            "mp_policy": MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce),
            "offload_policy": CPUOffloadPolicy() if knobs.get("fsdp_cpu_offload")
            else OffloadPolicy()}


def shard(model: nn.Module, knobs: Mapping[str, Any], device: torch.device,
          layers: Sequence[type] = (), mesh: Any = None) -> nn.Module:
    """The placed model sharded in place: ``fully_shard`` on each group of blocks, then the
    root, and the prefetch the knobs ask for. Build the optimizer from the returned model's
    parameters afterwards (they are the shards). A model without named blocks is one group,
    the root's: it runs, with neither the memory saving nor the overlap of per-block groups.
    ``mesh``: a framework's own; default: the knobs'. A step wrapper that names a module in
    ``PARTS_OF`` (the Lightning adapter's) has that module's parts sharded between the blocks
    and the root, as Lightning's own export shards them (``shard_parts``)."""
    from torch.distributed.fsdp import fully_shard

    mesh = mesh if mesh is not None else device_mesh(knobs, device)
    heads = shard_blocks(model, knobs, mesh, layers)
    parts_of = getattr(model, PARTS_OF, None)
    if isinstance(parts_of, nn.Module):
        shard_parts(parts_of, knobs, mesh)
    fully_shard(model, mesh=mesh, **fully_shard_arguments(knobs, root=True))
    prefetch(heads, int(knobs.get("fsdp_prefetch") or 0))
    return model


#: The attribute by which a step wrapper names the module whose parts ``shard`` shards.
PARTS_OF = "fsdp_parts_of"


def shard_blocks(model: nn.Module, knobs: Mapping[str, Any], mesh: Any,
                 layers: Sequence[type] = ()) -> list[nn.Module]:
    """``fully_shard`` on each group of ``model``'s blocks (``fsdp_wrap_blocks`` per group);
    returns each group's first module, for ``prefetch``."""
    from torch.distributed.fsdp import fully_shard

    kwargs = fully_shard_arguments(knobs)
    units = groups(blocks(model, layers), int(knobs.get("fsdp_wrap_blocks") or 1))
    for unit in units:
        fully_shard(unit if len(unit) > 1 else unit[0], mesh=mesh, **kwargs)
    return [unit[0] for unit in units]


def shard_parts(module: nn.Module, knobs: Mapping[str, Any], mesh: Any) -> list[nn.Module]:
    """Lightning's FSDP2 recipe above the blocks: ``fully_shard`` on each child of ``module``
    that holds parameters no group holds yet, never on ``module`` itself. Lightning calls a
    LightningModule's ``training_step``, not its ``forward``, so a group on the module would
    never be gathered by its forward hook where ``training_step`` calls its layers directly
    (``self.layer(x)``); each child's group is gathered when the child is called. A child
    without a forward of its own (``ModuleList``, ``ModuleDict``) is looked into instead; a
    child that shares a parameter with another (tied weights) is left out, as are parameters
    held by ``module`` itself: both stay for a group on ``module`` (``loose_parameters``).
    Returns the children sharded."""
    from torch.distributed.fsdp import fully_shard

    found: list[nn.Module] = []

    def visit(parent: nn.Module) -> None:
        for child in parent.children():
            if not loose_parameters(child):
                continue
            if type(child).forward is nn.Module.forward:  # a container: nothing calls it
                visit(child)
            else:
                found.append(child)

    visit(module)
    holders: dict[int, int] = {}
    for child in found:
        for p in loose_parameters(child):
            holders[id(p)] = holders.get(id(p), 0) + 1
    kwargs = fully_shard_arguments(knobs)
    parts = [c for c in found if all(holders[id(p)] == 1 for p in loose_parameters(c))]
    for part in parts:
        fully_shard(part, mesh=mesh, **kwargs)
    return parts


def loose_parameters(module: nn.Module) -> list[nn.Parameter]:
    """``module``'s parameters that no ``fully_shard`` group holds yet (a sharded one is a
    DTensor)."""
    from torch.distributed.tensor import DTensor

    return [p for p in module.parameters() if not isinstance(p, DTensor)]


def prefetch(heads: list[nn.Module], depth: int) -> None:
    """Each group all-gathers the next ``depth`` groups' parameters when its own forward
    starts, and the ``depth`` before it in backward (0: FSDP2's implicit one-ahead backward
    prefetch alone). ``heads``: each group's first module (a group shares its state)."""
    if depth <= 0:
        return
    for i, head in enumerate(heads):
        ahead = heads[i + 1:i + 1 + depth]
        behind = heads[max(0, i - depth):i][::-1]
        if ahead:
            head.set_modules_to_forward_prefetch(ahead)  # type: ignore[operator]
        if behind:
            head.set_modules_to_backward_prefetch(behind)  # type: ignore[operator]


def micro_step(model: nn.Module, last: bool) -> None:
    """``accumulation_no_sync`` under FSDP2: a micro-batch that is not its cycle's last keeps
    its gradients unsharded and unreduced, and its parameters gathered for the next one."""
    model.set_requires_gradient_sync(last)  # type: ignore[operator]
    model.set_reshard_after_backward(last)  # type: ignore[operator]


def fsdp_modules(model: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model: nn.Module, knobs: Mapping[str, Any]) -> Iterator[None]:
    """The same model with every parameter gathered and kept, no gradient reduction: its
    forward and backward run without a collective (the communication counterfactual of
    measure/comm.py; it holds the whole model per rank meanwhile). On leaving, every group
    is resharded, its flags restored, and the unreduced gradients dropped, so the next step
    reduces only its own."""
    modules = fsdp_modules(model)
    for m in modules:
        m.set_requires_gradient_sync(False, recurse=False)  # type: ignore[operator]
        m.set_reshard_after_backward(False, recurse=False)  # type: ignore[operator]
        m.set_reshard_after_forward(False, recurse=False)  # type: ignore[operator]
        m.unshard()  # type: ignore[operator]
    try:
        yield
    finally:
        after_forward = knobs.get("sharding") != "shard_grad_op"
        for m in modules:
            m.set_requires_gradient_sync(True, recurse=False)  # type: ignore[operator]
            m.set_reshard_after_backward(True, recurse=False)  # type: ignore[operator]
            # The root keeps its parameters after forward in any case (FSDP2's heuristic).
            m.set_reshard_after_forward(after_forward and m is not model,  # type: ignore[operator]
                                        recurse=False)
            _drop_unreduced_grads(m)
            m.reshard()  # type: ignore[operator]


def _drop_unreduced_grads(module: nn.Module) -> None:
    """The unsharded gradients a step without reduction left on the group's parameters
    (FSDP2 keeps them to reduce with the next synced backward's). FSDP2 has no public call
    for this: its parameter group's state is read as torch 2.14 lays it out."""
    from torch.distributed.fsdp import fully_shard

    state = fully_shard.state(module)  # type: ignore[attr-defined]
    found = getattr(state, "_fsdp_param_groups", None) or [getattr(state, "_fsdp_param_group", None)]
    for param in (p for group in found if group is not None for p in group.fsdp_params):
        param.unsharded_accumulated_grad = None
        unsharded = getattr(param, "_unsharded_param", None)
        if unsharded is not None:
            unsharded.grad = None
