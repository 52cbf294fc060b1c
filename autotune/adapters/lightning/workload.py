"""A user's LightningModule and its data as an autotune Workload (the trial side of the
adapter; the user-facing module is ``autotune.adapters.lightning``); the result as Trainer and
DataLoader arguments.

    autotune workload._target_=autotune.adapters.lightning.LightningWorkload \\
        +workload.module=my_pkg.models.MyModule +workload.module_args='{hidden: 256}' \\
        +workload.datamodule=my_pkg.data.MyData +workload.datamodule_args='{root: /data}'

Why not time ``Trainer.fit`` itself: a trial must split each step into loader wait, copy,
forward+backward and optimizer, read the loader alone (its ceiling), capture one whole step
in a CUDA Graph or compile it, and stop at a window's edge; Lightning's loop owns all of those
and hides them behind callbacks and a progress bar whose cost is not the model's. So the trial
runs what Lightning's automatic optimization runs, in autotune's window: the module's own
``training_step(batch, batch_idx)`` gives the loss (its ``self.log`` calls return at once
without a Trainer, as Lightning documents for testing), the optimizer is the one
``configure_optimizers`` returns (any of its forms; its LR scheduler steps per epoch in
Lightning and costs nothing per step, so it is left out), then backward, step, zero_grad.
Lightning's ``precision="bf16-mixed"`` / ``"16-mixed"`` are the same ``torch.autocast`` (and
GradScaler) as autotune's amp knob, and a compiled LightningModule runs its ``training_step``
compiled (``lightning.pytorch.utilities.compile.from_compiled``), which is what compiling the
step wrapper here does. The data is the DataModule's train dataset and collate function,
batched by autotune's loader knobs; trial 0 uses the DataModule's own loader settings.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune.adapters import (
    accumulation,
    best_document,
    environment,
    fsdp,
    in_process,
    load_object,
)
from autotune.adapters.ddp import ddp_strategy, launched, strategy_document
from autotune.core.batch import measure_shapes, tensors
from autotune.core.optimizer_impl import optimizer_kwargs, set_optimizer_impl
from autotune.core.shipping import Shipped
from autotune.core.training import loader_kwargs
from autotune.core.workload import Workload, WorkloadError

#: Trainer(precision=...) values and the amp knob they are.
PRECISION_AMP = {"32-true": "off", "32": "off", "bf16-mixed": "bf16", "16-mixed": "fp16",
                 "16": "fp16", "bf16": "bf16"}
AMP_PRECISION = {"off": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}


def _lightning() -> Any:
    try:
        import lightning.pytorch as pl
    except ImportError as exc:
        raise WorkloadError(
            "The Lightning adapter needs the lightning package: pip install -e '.[lightning]' "
            f"(import failed: {exc})."
        ) from exc
    return pl


class LightningStep(nn.Module):
    """The measured model: one call is the LightningModule's ``training_step`` on one batch.
    A mapping batch arrives as keywords (autotune calls ``model(**inputs)`` for mappings) and
    is handed back to ``training_step`` as the dict it was."""

    def __init__(self, module: nn.Module):
        super().__init__()
        # Without a Trainer, self.log returns at once; its warning would repeat every trial.
        warnings.filterwarnings("ignore", message=r"You are trying to `self.log\(\)` but the "
                                r"`self.trainer` reference is not registered")
        self.module: Any = module  # a LightningModule (Any: its methods, not nn.Module's)
        self.batch_idx = 0

    def to(self, *args: Any, **kwargs: Any) -> LightningStep:  # type: ignore[override]
        # LightningModule.to also records its device (self.device in training_step).
        self.module.to(*args, **kwargs)
        return self

    @property
    def fsdp_parts_of(self) -> nn.Module:
        """Sharded, the LightningModule's parts get groups of their own between its blocks and
        this root (core/sharding.shard_parts), as the sharded export shards it under
        Lightning (adapters/fsdp.shard_configured): the trials measure the export's groups."""
        return self.module  # type: ignore[no-any-return]

    @torch.compiler.disable
    def _next_index(self) -> int:
        index, self.batch_idx = self.batch_idx, self.batch_idx + 1
        return index

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        batch = args[0] if len(args) == 1 and not kwargs else (kwargs if kwargs else args)
        return self.module.training_step(batch, self._next_index())


class LightningWorkload(Workload):
    """A LightningModule (``module``: its class or a factory, with ``module_args``) trained on
    the train data of a LightningDataModule (``datamodule``, ``datamodule_args``), of a
    factory returning a DataLoader (``dataloader``, ``dataloader_args``), or else of the
    module's own ``train_dataloader()``. ``precision`` is the Trainer precision the user runs
    today (the baseline's amp)."""

    name = "lightning"
    knob_limits = {
        "cuda_graphs": ([False], "Lightning's loop has no whole-step CUDA Graph (compile's "
                                 "reduce-overhead is its way to graphs)"),
        "set_to_none": ([True], "Lightning's optimizer_zero_grad calls zero_grad(), which sets "
                                "gradients to None"),
        "non_blocking": ([True], "Lightning copies batches to CUDA with non_blocking=True"),
        "length_grouping": ([False], "the Lightning adapter keeps the DataModule's own sampler "
                                     "(its prepared loader does not regroup batches by length)"),
        "accumulation_no_sync": ([True], "Lightning's DDP strategy skips the all-reduce on an "
                                         "accumulation cycle's micro-batches but its last"),
    }
    #: The verify side for this workload: the user's Trainer.fit (autotune/production/verify.py).
    verifier = "autotune.adapters.lightning.verify"

    def __init__(self, module: str, module_args: Mapping[str, Any] | None = None,
                 datamodule: str | None = None, datamodule_args: Mapping[str, Any] | None = None,
                 dataloader: str | None = None, dataloader_args: Mapping[str, Any] | None = None,
                 precision: str | int = "32-true", image_inputs: bool = False,
                 static_shapes: bool | None = None, accumulate_grad_batches: int = 1):
        """``static_shapes``: None measures it (8 batches drawn through the loader's collate
        function); True/False states it. ``accumulate_grad_batches``: the Trainer's, as the
        user trains (the global batch per rank is the loader's batch_size x it)."""
        self.pl = _lightning()
        self.module_path, self.module_args = module, dict(module_args or {})
        self.datamodule_spec = (datamodule, datamodule_args)
        self.loader = self._train_loader(datamodule, datamodule_args, dataloader, dataloader_args)
        self.source = datamodule or dataloader or f"{module}.train_dataloader()"
        self._configure({"precision": precision, "accumulate_grad_batches": accumulate_grad_batches},
                        image_inputs, static_shapes)

    def _configure(self, trainer_kwargs: Mapping[str, Any], image_inputs: bool,
                   static_shapes: bool | None) -> None:
        """What both ways in (import paths, live objects) set up alike, from the loader and the
        user's Trainer arguments (``precision`` is the baseline's amp, ``accumulate_grad_batches``
        its gradient accumulation: core/global_batch.py)."""
        self.trainer_kwargs = dict(trainer_kwargs)
        precision = self.trainer_kwargs.get("precision", "32-true")
        if str(precision) not in PRECISION_AMP:
            raise WorkloadError(
                f"precision={precision!r} is not one autotune measures: use one of "
                f"{', '.join(PRECISION_AMP)} (mixed precision is torch.autocast, as the amp knob; "
                "'bf16-true' / '16-true' cast the weights and are not searched)."
            )
        self.image_inputs = image_inputs
        collate = self.loader.collate_fn
        self.pads_to_multiple = hasattr(collate, "pad_to_multiple_of")
        accum = self.trainer_kwargs.get("accumulate_grad_batches", 1)
        if isinstance(accum, bool) or not isinstance(accum, int) or accum < 1:
            raise WorkloadError(
                f"accumulate_grad_batches={accum!r}: autotune takes a whole number >= 1 of "
                "batches per optimizer step (a schedule of accumulation, as a dict, varies the "
                "global batch during training and is not measured).")
        self._clipping(self.trainer_kwargs)
        self.defaults = {**_loader_defaults(self.loader), "amp": PRECISION_AMP[str(precision)],
                         "pad_to_multiple_of": getattr(collate, "pad_to_multiple_of", None),
                         "grad_accum": accum, "accumulation_no_sync": accum > 1}
        self.input_shapes = measure_shapes(self.loader.dataset, collate,
                                           self.defaults["batch_size"])
        self.static_shapes = (self.input_shapes["distinct"] == 1 if static_shapes is None
                              else bool(static_shapes))
        self.pads_batches = self.input_shapes["padded"] > 0  # as the batches say (core/tokens.py)

    def _clipping(self, trainer_kwargs: Mapping[str, Any]) -> None:
        """The user's Trainer clipping (``gradient_clip_val``, by norm or by value as
        ``gradient_clip_algorithm`` says), clipped in each trial's step on the unscaled
        gradients, as Lightning's precision plugin does: the trials trained unclipped."""
        clip = trainer_kwargs.get("gradient_clip_val")
        if not clip:
            return
        algorithm = str(trainer_kwargs.get("gradient_clip_algorithm") or "norm")
        if algorithm not in ("norm", "value"):
            raise WorkloadError(f"gradient_clip_algorithm={algorithm!r}: Lightning's are "
                                "'norm' and 'value'.")
        if algorithm == "value":
            self.clip_grad_value = float(clip)
        else:
            self.max_grad_norm = float(clip)

    def _new_module(self) -> Any:
        return self._checked(load_object(self.module_path, self.module_args, "module"))

    def new_datamodule(self) -> Any:
        """A fresh DataModule as the user's code builds it (None: the data is a DataLoader
        factory's or the module's own): what verify hands to Trainer.fit."""
        path, args = self.datamodule_spec
        return load_object(path, args, "datamodule") if path else None

    def _checked(self, module: Any) -> Any:
        if not isinstance(module, self.pl.LightningModule):
            raise WorkloadError(f"module={self.module_path!r} built a {type(module).__name__}, "
                                "not a lightning.pytorch.LightningModule.")
        if not module.automatic_optimization:
            raise WorkloadError(
                f"module={self.module_path!r} uses manual optimization (automatic_optimization="
                "False): its training_step steps the optimizer itself, so the step cannot be "
                "split and tuned. Only automatic optimization is supported.")
        return module

    def _train_loader(self, datamodule: str | None, datamodule_args: Mapping[str, Any] | None,
                      dataloader: str | None, dataloader_args: Mapping[str, Any] | None) -> DataLoader:
        if datamodule:
            loader = self._datamodule_loader(load_object(datamodule, datamodule_args,
                                                         "datamodule"), datamodule)
        elif dataloader:
            loader = load_object(dataloader, dataloader_args, "dataloader")
        else:
            # A module built only for its loader: model() builds the trained one after
            # Training seeds the RNG, so its initial weights are the same in every trial.
            loader = self._new_module().train_dataloader()
        return _checked_loader(loader, datamodule or dataloader or
                               f"{self.module_path}.train_dataloader()")

    def _datamodule_loader(self, dm: Any, where: str) -> DataLoader:
        if not isinstance(dm, self.pl.LightningDataModule):
            raise WorkloadError(f"datamodule={where!r} is a {type(dm).__name__}, not a "
                                "lightning.pytorch.LightningDataModule.")
        dm.prepare_data()
        dm.setup("fit")
        return dm.train_dataloader()

    # --- the Workload protocol -------------------------------------------------------------
    def dataset(self, transfer_dtype: str) -> Dataset:
        return self.loader.dataset

    def collate_fn(self) -> Callable[[list[Any]], Any] | None:
        return self.loader.collate_fn

    def split_batch(self, batch: Any) -> tuple[Any, Any]:
        """The whole batch is training_step's input; its loss needs no separate targets."""
        return batch, None

    def model(self) -> nn.Module:
        self.step_module = LightningStep(self._new_module())
        return self.step_module

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        if isinstance(outputs, Mapping) and "loss" in outputs:
            outputs = outputs["loss"]
        if not isinstance(outputs, torch.Tensor):
            raise RuntimeError(
                f"{self.module_path}.training_step returned {type(outputs).__name__}; autotune "
                "needs the loss tensor (or a dict with 'loss'). Returning None skips a step in "
                "Lightning, which cannot be timed as a training step.")
        return outputs

    def optimizer(self, params: Iterable[nn.Parameter], **impl: Any) -> torch.optim.Optimizer:
        """``configure_optimizers``' one optimizer, with autotune's foreach=/fused= set on it
        in place (optimizer_impl.set_optimizer_impl: what prepare_module does in production)."""
        module = self.step_module.module
        found = optimizers_in(module.configure_optimizers())
        if len(found) != 1:
            raise WorkloadError(
                f"{self.module_path}.configure_optimizers returned {len(found)} optimizers; "
                "automatic optimization trains with exactly one.")
        return set_optimizer_impl(found[0], {"optimizer_impl": _impl_name(impl)})

    def describe(self) -> str:
        return f"lightning {self.module_path} on {self.source}"

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {"lightning.yaml": lightning_document(best)}


class LightningObjectsWorkload(LightningWorkload):
    """A live LightningModule and its data (a DataModule or a train DataLoader, else the
    module's own ``train_dataloader()``), shipped to the trial processes by
    ``autotune.adapters.lightning.tune`` (autotune/core/shipping.py), with the user's Trainer
    arguments (``precision`` is the baseline's amp). ``image_inputs`` None: measured (a 4-D
    floating-point tensor in a batch)."""

    def __init__(self, objects: str, name: str = "lightning", image_inputs: bool | None = None,
                 static_shapes: bool | None = None):
        self.pl = _lightning()
        self.shipped = Shipped(objects)
        self.name = name
        self.module_path, self.module_args = self.shipped["module_name"], {}
        self.datamodule_spec = (None, None)
        if self.shipped["datamodule"] is not None:
            self.source = f"its {type(self.shipped['datamodule']).__name__}"
            loader = self._datamodule_loader(self.shipped.fresh("datamodule"), self.source)
        elif self.shipped["train_dataloaders"] is not None:
            self.source, loader = "its train DataLoader", self.shipped["train_dataloaders"]
        else:
            self.source = f"{self.module_path}.train_dataloader()"
            loader = self._new_module().train_dataloader()
        self.loader = _checked_loader(loader, self.source)
        images = _has_images(next(iter(self.loader))) if image_inputs is None else image_inputs
        self._configure(self.shipped["trainer_kwargs"], images, static_shapes)

    def _new_module(self) -> Any:
        """A fresh copy of the user's module (its shipped bytes loaded again): every trial
        starts from the same weights."""
        return self._checked(self.shipped.fresh("module"))

    def new_datamodule(self) -> Any:
        return self.shipped.fresh("datamodule") if self.shipped["datamodule"] is not None else None

    def new_loader(self) -> Any:
        """The user's own train DataLoader, where they gave one instead of a DataModule."""
        return self.shipped.fresh("train_dataloaders")


def _checked_loader(loader: Any, where: str) -> DataLoader:
    if not isinstance(loader, DataLoader) or loader.batch_size is None:
        raise WorkloadError(
            f"{where} gave {type(loader).__name__}: the Lightning adapter needs one torch "
            "DataLoader with a batch_size (not a batch_sampler, a dict of loaders or a "
            "CombinedLoader), since autotune rebuilds it with the loader knobs.")
    return loader


def _has_images(batch: Any) -> bool:
    """A 4-D floating-point tensor in the batch: NCHW images, so channels_last may apply."""
    return any(t.ndim == 4 and t.is_floating_point() for t in tensors(batch))


def _loader_defaults(loader: DataLoader) -> dict[str, Any]:
    """The user's current DataLoader settings: the baseline's loader knobs."""
    out: dict[str, Any] = {"batch_size": int(loader.batch_size or 1),
                           "num_workers": int(loader.num_workers),
                           "pin_memory": bool(loader.pin_memory)}
    if loader.num_workers > 0:
        out["prefetch_factor"] = int(loader.prefetch_factor or 2)
        out["persistent_workers"] = bool(loader.persistent_workers)
    return out


def _impl_name(impl: Mapping[str, Any]) -> str:
    """The knob's value for Training's foreach=/fused= keywords."""
    return next((k for k in ("fused", "foreach") if impl.get(k)), "default")


def optimizers_in(out: Any) -> list[torch.optim.Optimizer]:
    """Every optimizer in configure_optimizers' return value, whichever form Lightning allows:
    an optimizer, a list of them, ([optimizers], [schedulers]), a dict with "optimizer", or a
    list of such dicts."""
    if isinstance(out, torch.optim.Optimizer):
        return [out]
    if isinstance(out, Mapping):
        return optimizers_in(out.get("optimizer"))
    if isinstance(out, (list, tuple)):
        if len(out) == 2 and isinstance(out[0], (list, tuple)):
            return optimizers_in(list(out[0]))
        return [o for item in out for o in optimizers_in(item)]
    return []


# --- export --------------------------------------------------------------------------------
def trainer_kwargs(best: Any) -> dict[str, Any]:
    """``lightning.Trainer(**trainer_kwargs(best), ...)``: precision, cuDNN autotuning and the
    gradient accumulation (best.yaml's grad_accum: with the loader's batch_size, the global
    batch the study measured; a best.yaml without one leaves the Trainer's own); for a study launched as
    N ranks, ``devices=N`` and ``strategy=DDPStrategy(...)`` with the measured DDP arguments
    and comm hook (adapters/ddp.py), or, sharded, ``ModelParallelStrategy`` (FSDP2, the
    module sharded in ``configure_model`` by ``prepare_module``: adapters/fsdp.py)."""
    doc = best_document(best)
    out = _plain_trainer_kwargs(doc)
    if launched(doc):
        out["devices"] = int(doc["launch"]["nproc_per_node"])
        out["strategy"] = (fsdp.model_parallel_strategy(doc) if fsdp.sharded_study(doc)
                           else ddp_strategy(doc))
    return out


def _plain_trainer_kwargs(doc: dict[str, Any]) -> dict[str, Any]:
    """The Trainer arguments that are plain values (lightning.yaml's ``trainer``)."""
    knobs = doc["knobs"]
    return {"precision": AMP_PRECISION[knobs["amp"]],
            "benchmark": bool(knobs["cudnn_benchmark"]),
            # A best.yaml written before grad_accum was carried: the Trainer's own is kept
            # (prepare_module warns where it accumulates).
            **({"accumulate_grad_batches": accumulation(doc)} if "grad_accum" in doc else {})}


def dataloader_kwargs(best: Any) -> dict[str, Any]:
    """``DataLoader(dataset, **dataloader_kwargs(best), shuffle=..., collate_fn=...)``: the
    same loader arguments the trials ran with (``autotune.core.training.loader_kwargs``)."""
    return loader_kwargs(best_document(best)["knobs"])


def lightning_document(best: Any) -> dict[str, Any]:
    """lightning.yaml: everything the exported configuration sets, in Lightning's terms."""
    doc = best_document(best)
    knobs = doc["knobs"]
    mode = knobs["compile"]
    trainer = _plain_trainer_kwargs(doc)
    strategy = fsdp.strategy_document(doc) if fsdp.sharded_study(doc) else strategy_document(doc)
    if strategy:  # the strategy is an object: lightning.yaml says how to build it
        trainer["devices"] = strategy["devices"]
    return {
        "trainer": trainer,
        "strategy": strategy,
        "dataloader": dataloader_kwargs(doc),
        "module": {"compile": None if mode == "off" else {"mode": None if mode == "default" else mode},
                   "channels_last": bool(knobs["channels_last"])},
        "optimizer_kwargs": optimizer_kwargs(knobs),
        "float32_matmul_precision": "high" if knobs["tf32"] else "highest",
        # Set in the training process by prepare_module (before fit forks the loader's
        # workers); ``environment`` sets the same for a process started with it.
        "in_process": in_process(knobs),
        "environment": environment(knobs),
        "samples_per_sec": (doc.get("metrics") or {}).get("samples_per_sec"),
        "speedup": doc.get("speedup"),
    }
