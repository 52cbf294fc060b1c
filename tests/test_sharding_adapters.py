"""The sharded exports as the frameworks' real objects: Hugging Face TrainingArguments with
fsdp/fsdp_config and accelerate's FSDP plugin built from them, Lightning's
ModelParallelStrategy; and the Trainer's limits on the CPU (nothing launched here)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune.cli.app import ranked
from autotune.cli.config import LaunchConfig
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.workload import build_workload
from autotune.results.sharding_export import fsdp_section

L = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")

from tests.test_adapters import HF_SPEC  # noqa: E402
from tests.test_ddp_adapters import KNOBS  # noqa: E402

LAUNCH = {"nproc_per_node": 2, "nnodes": 1}


def _sharded(**knobs: Any) -> dict[str, Any]:
    """best.yaml's document of a sharded study of 2 ranks (results/export.py's sections)."""
    k = {**KNOBS, "sharding": "shard_grad_op", "fsdp_param_dtype": "bf16",
         "fsdp_reduce_dtype": "fp32", "fsdp_wrap_blocks": 1, "fsdp_prefetch": 0,
         "fsdp_cpu_offload": False, "activation_checkpointing": True, **knobs}
    return {"knobs": k, "device": {"type": "cuda"}, "launch": LAUNCH,
            "fsdp_kwargs": fsdp_section(LAUNCH, k, {"block_types": ["GPT2Block"]})}


def test_hf_export_is_real_training_arguments_with_fsdp2_and_accelerates_plugin(
        tmp_path: Path) -> None:
    from accelerate.utils import FullyShardedDataParallelPlugin

    from autotune.adapters.fsdp import set_plugin_precision
    from autotune.adapters.hf import training_arguments_kwargs

    doc = _sharded()
    fields = training_arguments_kwargs(doc)
    assert not any(k.startswith("ddp_") for k in fields)  # FSDP2's ranks, not DDP's
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **fields)
    plugin_args = args.fsdp_plugin_args
    assert args.fsdp is True and plugin_args["fsdp_version"] == 2
    assert plugin_args["reshard_after_forward"] is False  # shard_grad_op
    assert plugin_args["transformer_cls_names_to_wrap"] == "GPT2Block"
    # FSDP's own activation checkpointing, not the field the Trainer warns about under FSDP.
    assert plugin_args["activation_checkpointing"] is True
    assert args.gradient_checkpointing is False
    plugin = FullyShardedDataParallelPlugin(**plugin_args)
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is False
    assert plugin.transformer_cls_names_to_wrap == ["GPT2Block"]

    class Live:  # a live Accelerator's state, as hf.apply finds it after it is built
        class state:  # noqa: N801
            fsdp_plugin = plugin

    assert set_plugin_precision(Live, doc) is True
    policy = plugin.mixed_precision_policy
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    full = training_arguments_kwargs(_sharded(sharding="full_shard"))
    assert full["fsdp_config"]["reshard_after_forward"] is True


def test_the_trainer_is_not_sharded_where_accelerate_cannot(cpu_env: Env) -> None:
    """On the CPU accelerate runs the Trainer's ranks in DDP: a study keeps no_shard and
    says why; everywhere, the Trainer's FSDP2 wraps every layer with no explicit prefetch."""
    from autotune.adapters.fsdp import HF_CPU_SHARDING

    wl = build_workload(dict(HF_SPEC))
    space = build_space(ranked(cpu_env, LaunchConfig(nproc_per_node=2)), wl, {})
    assert space.domains["sharding"].values == ["no_shard"]
    assert space.domains["sharding"].reason == HF_CPU_SHARDING
    gpu = ranked(Env(**{**cpu_env.__dict__, "device": "cuda", "gpu_count": 2}),
                 LaunchConfig(nproc_per_node=2))
    on_gpu = build_space(gpu, wl, {})
    assert on_gpu.domains["sharding"].values == ["no_shard", "full_shard", "shard_grad_op"]
    assert on_gpu.domains["fsdp_wrap_blocks"].values == [1]
    assert on_gpu.domains["fsdp_prefetch"].values == [0]


def test_lightning_export_is_the_real_model_parallel_strategy_and_a_sharding_hook(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The export is ModelParallelStrategy over the study's ranks, and the prepared module's
    ``configure_model`` shards it as measured: a real Trainer fit with that strategy over one
    CPU process (gloo; what one process allows), where the hook's body runs on the strategy's
    own device mesh and FSDP2 wraps the model with shard_grad_op's and bf16's settings."""
    import torch.distributed as dist
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from autotune.adapters.lightning import prepare_module, trainer_kwargs
    from autotune.adapters.lightning_workload import lightning_document

    doc = _sharded()
    kwargs = trainer_kwargs(doc)
    strategy = kwargs["strategy"]
    assert isinstance(strategy, ModelParallelStrategy) and kwargs["devices"] == 2
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (2, 1)
    said = lightning_document(doc)["strategy"]
    assert said["class"].endswith("ModelParallelStrategy")
    assert said["fsdp_kwargs"]["reshard_after_forward"] is False

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    module = Module()
    threads = torch.get_num_threads()
    try:
        prepared = prepare_module(module, {**doc, "device": {"type": "cpu"}})
    finally:
        torch.set_num_threads(threads)
    # ModelParallelStrategy refuses a module without its own configure_model: it has one now.
    from lightning.pytorch.utilities.model_helpers import is_overridden

    assert not is_overridden("configure_model", Module())
    assert is_overridden("configure_model", prepared)

    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # the strategy's own process group, here
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False,
                        strategy=ModelParallelStrategy(data_parallel_size=1,
                                                       tensor_parallel_size=1),
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    try:
        with warnings.catch_warnings():  # the check at train start: 1 device, 2 measured
            warnings.simplefilter("ignore")
            trainer.fit(prepared, torch.utils.data.DataLoader(data, batch_size=4))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert trainer.global_step == 2
    assert isinstance(prepared, FSDPModule)  # the hook ran: sharded on the strategy's mesh
    assert isinstance(prepared.layer.weight, DTensor)
    state = prepared._get_fsdp_state()
    group = state._fsdp_param_group
    assert group.mp_policy.param_dtype == torch.bfloat16  # fsdp_param_dtype=bf16
    assert group.mp_policy.reduce_dtype == torch.float32
    assert group.post_forward_mesh_info is None  # shard_grad_op: kept from forward to backward


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
