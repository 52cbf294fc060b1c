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
    own device mesh and FSDP2 wraps the module's layer with shard_grad_op's and bf16's
    settings."""
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from autotune.adapters.lightning import prepare_module, trainer_kwargs
    from autotune.adapters.lightning.workload import lightning_document

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
            return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

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

    trainer = _fit(prepared, monkeypatch)
    assert trainer.global_step == 2
    # The hook ran: Lightning's FSDP2 recipe on the strategy's mesh, the layer a group of its
    # own and the LightningModule none (it holds no parameter of its own).
    assert not isinstance(prepared, FSDPModule) and isinstance(prepared.layer, FSDPModule)
    assert isinstance(prepared.layer.weight, DTensor)
    group = prepared.layer._get_fsdp_state()._fsdp_param_group
    assert group.mp_policy.param_dtype == torch.bfloat16  # fsdp_param_dtype=bf16
    assert group.mp_policy.reduce_dtype == torch.float32
    assert group.post_forward_mesh_info is None  # shard_grad_op: kept from forward to backward


def _fit(module: Any, monkeypatch: pytest.MonkeyPatch, steps: int = 2) -> Any:
    """``module`` fit for ``steps`` steps by a real Trainer with ModelParallelStrategy over one
    CPU process (gloo), on 16 samples of 4 features and 2 classes in batches of 4."""
    import torch.distributed as dist
    from lightning.pytorch.strategies import ModelParallelStrategy

    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # the strategy's own process group, here
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    for name in ("LOCAL_RANK", "NODE_RANK"):  # Lightning sets them: unset again after the test,
        monkeypatch.setenv(name, "0")         # or a later Trainer of transformers reads a rank
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False,
                        strategy=ModelParallelStrategy(data_parallel_size=1,
                                                       tensor_parallel_size=1),
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    try:
        with warnings.catch_warnings():  # the check at train start: 1 device, 2 measured
            warnings.simplefilter("ignore")
            trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return trainer


class Direct(L.LightningModule):
    """As most LightningModules are written: ``training_step`` calls its layers directly, never
    ``self(x)``; a container of layers (ModuleList); with ``own=True`` a parameter held by the
    module itself."""

    def __init__(self, own: bool = False, features: int = 4, classes: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(features, 8), torch.nn.Linear(8, 8)])
        self.head = torch.nn.Linear(8, classes)
        self.scale = torch.nn.Parameter(torch.ones(classes)) if own else None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0]
        for layer in self.layers:
            x = torch.relu(layer(x))
        out = self.head(x) * (self.scale if self.scale is not None else 1.0)
        return torch.nn.functional.cross_entropy(out, batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("own", [False, True], ids=["children", "own_parameter"])
def test_a_module_whose_training_step_calls_its_layers_fits_sharded(
        own: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sharded export on a LightningModule whose ``training_step`` calls its layers
    directly: the groups are its children's (the ModuleList looked into), not the module's,
    so each is gathered when it is called; a parameter the module holds itself is in a group
    on the module, gathered around ``training_step``. A real fit trains every parameter.
    Sharding the LightningModule itself as the root (as before) failed this fit with
    "aten.addmm got mixed torch.Tensor and DTensor"; so did leaving training_step
    unregistered for the module's own parameter."""
    from torch.distributed.fsdp import FSDPModule

    from autotune.adapters.lightning import prepare_module

    module = Direct(own)
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    threads = torch.get_num_threads()
    try:
        prepared = prepare_module(module, {**_sharded(), "device": {"type": "cpu"}})
    finally:
        torch.set_num_threads(threads)
    assert _fit(prepared, monkeypatch).global_step == 2
    sharded = {n for n, m in prepared.named_modules() if isinstance(m, FSDPModule)}
    assert sharded == {"layers.0", "layers.1", "head", *([""] if own else [])}
    for name, p in prepared.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        assert not torch.equal(full.detach(), before[name]), f"{name} was not trained"


def test_the_trials_shard_a_lightning_module_into_the_exports_groups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' step wrapper (LightningStep, sharded by core/sharding.shard) gets the
    groups the export gives the module under Lightning: its children's, the ModuleList looked
    into; the module's own parameter in the root's (the wrapper's, whose forward is
    training_step). One real step on a gloo group of one rank."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    from autotune.adapters.lightning.workload import LightningStep
    from autotune.core.sharding import shard

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        step = shard(LightningStep(Direct(own=True)), _sharded()["knobs"], torch.device("cpu"))
        sharded = {n for n, m in step.named_modules() if isinstance(m, FSDPModule)}
        assert sharded == {"", "module.layers.0", "module.layers.1", "module.head"}
        assert "module" not in sharded  # the LightningModule: its parameter is the root's
        step((torch.randn(4, 4), torch.randint(0, 2, (4,)))).backward()
        assert all(p.grad is not None for p in step.parameters())
    finally:
        dist.destroy_process_group()


def test_a_sharded_lightning_study_of_such_a_module_is_verified_as_its_ranks(
        tmp_path: Path) -> None:
    """End to end on 2 gloo ranks: a study of that module, sharded (FSDP2 on the CPU), then
    ``autotune verify``, whose exported side is the user's Trainer.fit under torchrun with
    ModelParallelStrategy and the export's configure_model. Before Lightning's recipe, that
    side failed on both ranks: "aten.addmm.default got mixed torch.Tensor and DTensor"."""
    from tests.conftest import TINY_ARGS, run_cli

    proc = run_cli(["workload._target_=autotune.adapters.lightning.LightningWorkload",
                    "+workload.module=tests.test_sharding_adapters.Direct",
                    "+workload.module_args={own: true}",
                    "+workload.datamodule=examples.lightning_tune.RandomData",
                    "+workload.datamodule_args={n: 512, features: 4, classes: 2}",
                    "study.name=ls", "study.n_trials=1", "study.confirm_runs=0",
                    "study.numerics_steps=0", "device=cpu", "launch.nproc_per_node=2",
                    "knobs.sharding=full_shard", *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "ls"
    proc = run_cli(["verify", str(out), "--rounds", "1", "--steps", "6", "--warmup", "2"],
                   tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (out / "verify" / "0-exported.log").read_text()
    assert "MEMBER: 2/2" in log and "FSDPLinear" in log  # 2 ranks, the layers sharded


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
