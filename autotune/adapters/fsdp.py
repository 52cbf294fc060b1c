"""The adapters' sharded exports: a study that measured FSDP2 ranks (``sharding`` other than
no_shard) handed back in each framework's own terms, as adapters/ddp.py hands back DDP.

- Hugging Face (transformers 5.24, accelerate 1.15, read there): ``fsdp=True`` with
  ``fsdp_config`` (``version: 2``; ``reshard_after_forward``: full_shard's true,
  shard_grad_op's false; ``TRANSFORMER_BASED_WRAP`` over the decoder layers the trials
  sharded, ``transformer_layer_cls_to_wrap``; FSDP's own ``activation_checkpointing`` in place
  of the ``gradient_checkpointing`` field, which the Trainer warns adds an all-gather under
  FSDP; ``cpu_offload``). Accelerate's FSDP2 wraps every layer and the root with no explicit
  prefetch, so the study keeps ``fsdp_wrap_blocks`` at 1 and ``fsdp_prefetch`` at 0 for the
  Trainer (``HF_LIMITS``). The shards' mixed precision has no field: ``hf.apply`` sets the
  Accelerator's ``fsdp_plugin.mixed_precision_policy`` (accelerate builds one from the
  Trainer's ``bf16`` otherwise, reducing in bf16). On the CPU accelerate 1.15 does not shard:
  its ``AcceleratorState`` turns FSDP on only for multi-device types (MULTI_GPU, MULTI_NPU,
  MULTI_XPU...), and under torchrun on CPUs (MULTI_CPU) it drops the ``fsdp_plugin`` and
  runs DDP, so a Trainer study on the CPU keeps ``sharding=no_shard`` (``HF_CPU_SHARDING``).
- Lightning (2.6): FSDP2 is ``ModelParallelStrategy(data_parallel_size=N,
  tensor_parallel_size=1)``, which shards nothing itself: the LightningModule's
  ``configure_model`` applies ``fully_shard`` over ``self.device_mesh["data_parallel"]``.
  ``lightning.prepare_module`` gives it that hook with the measured arguments
  (``shard_configured``): the blocks, then the module's children that hold parameters, as
  Lightning's FSDP2 guide shards (never the LightningModule itself, whose ``training_step``
  Lightning calls in place of ``forward``), the same groups as the trials'
  ``core/sharding.shard`` (``shard_blocks``, ``shard_parts``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from autotune.adapters.ddp import launched
from autotune.core.sharding import mp_dtypes, sharded

#: What the Trainer's FSDP2 (accelerate 1.15) can be given, for the study's knob_limits.
HF_LIMITS: dict[str, tuple[list[Any], str]] = {
    "fsdp_wrap_blocks": ([1], "the Trainer's FSDP2 (accelerate) wraps each transformer layer "
                              "on its own (TRANSFORMER_BASED_WRAP)"),
    "fsdp_prefetch": ([0], "the Trainer's FSDP2 (accelerate) sets no explicit prefetch"),
    "sharding": (["no_shard", "full_shard", "shard_grad_op"],
                 "the Trainer's hybrid sharding needs accelerate's parallelism_config"),
}
#: Why a Trainer study on the CPU does not shard (Workload.cpu_sharding).
HF_CPU_SHARDING = ("accelerate 1.15 turns FSDP on only for multi-GPU (and NPU, XPU...) runs; "
                   "the Trainer's CPU ranks (MULTI_CPU) drop the fsdp_plugin and run DDP")


def sharded_study(doc: Mapping[str, Any]) -> bool:
    """Whether best.yaml's configuration ran as sharded ranks."""
    return launched(doc) and sharded(doc.get("knobs") or {})


# --- Hugging Face --------------------------------------------------------------------------
def training_arguments_fsdp(doc: Mapping[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """TrainingArguments' ``fsdp`` and ``fsdp_config`` for a sharded study ({} otherwise),
    where the installed TrainingArguments has them; activation checkpointing moves into
    ``fsdp_config`` (the field of its own is then set false)."""
    if not sharded_study(doc) or "fsdp" not in fields:
        return {}
    k = doc["knobs"]
    blocks = list((doc.get("fsdp_kwargs") or {}).get("block_types") or [])
    config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": k.get("sharding") != "shard_grad_op",
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP" if blocks else "NO_WRAP",
        "activation_checkpointing": bool(k.get("activation_checkpointing", False)),
        "cpu_offload": bool(k.get("fsdp_cpu_offload", False)),
    }
    if blocks:
        config["transformer_layer_cls_to_wrap"] = blocks
    return {"fsdp": True, "fsdp_config": config}


def mixed_precision_policy(doc: Mapping[str, Any]) -> Any:
    """The measured ``MixedPrecisionPolicy`` (None: not sharded)."""
    if not sharded_study(doc):
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    param, reduce = mp_dtypes(doc["knobs"])
    return MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)


def set_plugin_precision(accelerator: Any, doc: Mapping[str, Any]) -> bool:
    """The measured mixed precision on a live Accelerator's FSDP plugin; False where it has
    none (one process, or accelerate's CPU ranks: see the module's docstring)."""
    plugin = getattr(getattr(accelerator, "state", None), "fsdp_plugin", None)
    policy = mixed_precision_policy(doc)
    if plugin is None or policy is None:
        return False
    plugin.mixed_precision_policy = policy
    return True


# --- Lightning -----------------------------------------------------------------------------
def model_parallel_strategy(doc: Mapping[str, Any]) -> Any:
    """``lightning.pytorch.strategies.ModelParallelStrategy``: every rank one data-parallel
    shard (``data_parallel_size`` = the ranks, no tensor parallelism)."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    launch = doc["launch"]
    world = int(launch["nproc_per_node"]) * int(launch.get("nnodes", 1))
    return ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)


def strategy_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """lightning.yaml's ``strategy`` for a sharded study."""
    launch = doc["launch"]
    world = int(launch["nproc_per_node"]) * int(launch.get("nnodes", 1))
    return {"class": "lightning.pytorch.strategies.ModelParallelStrategy",
            "kwargs": {"data_parallel_size": world, "tensor_parallel_size": 1},
            "configure_model": "autotune.adapters.lightning.prepare_module(module, best) "
                               "shards the module in configure_model with fsdp_kwargs",
            "fsdp_kwargs": dict(doc.get("fsdp_kwargs") or {}),
            "devices": int(launch["nproc_per_node"])}


#: The LightningModule's methods Lightning calls in place of ``forward``: where the module
#: itself holds a group (parameters of its own), each it overrides gathers it, as forward would.
STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


def shard_configured(module: Any, knobs: Mapping[str, Any]) -> None:
    """Shard a LightningModule as the trials did, over the strategy's data-parallel mesh, the
    way Lightning's FSDP2 guide shards: ``fully_shard`` on its blocks (by their
    ``_no_split_modules`` names), then on its children that hold the other parameters
    (core/sharding.shard_parts), not on the LightningModule, since Lightning calls its
    ``training_step`` and never its ``forward``. Parameters the module holds itself (or that
    tied children share) go in a group on the module, gathered around each step method it
    overrides (``register_fsdp_forward_method``): the trials' root group held them the same
    way. The body of the ``configure_model`` hook that ``lightning.prepare_module`` gives
    it, after its own hook. Once: Lightning may call ``configure_model`` more than once."""
    from lightning.pytorch.utilities.model_helpers import is_overridden
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    from autotune.core.sharding import (
        fsdp_modules,
        fully_shard_arguments,
        loose_parameters,
        prefetch,
        shard_blocks,
        shard_parts,
    )

    if fsdp_modules(module):
        return
    mesh = module.device_mesh["data_parallel"]
    heads = shard_blocks(module, knobs, mesh)
    shard_parts(module, knobs, mesh)
    if loose_parameters(module):
        fully_shard(module, mesh=mesh, **fully_shard_arguments(knobs, root=True))
        for name in STEP_METHODS:
            if is_overridden(name, module):
                register_fsdp_forward_method(module, name)
    prefetch(heads, int(knobs.get("fsdp_prefetch") or 0))
