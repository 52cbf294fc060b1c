"""The Workload protocol: what a user implements so autotune can train their model.

A workload owns what must not change while tuning (data, model, loss, optimizer family);
autotune owns how it is fed and executed (the knobs). Implement a subclass of ``Workload``,
expose a factory, and run ``autotune workload._target_=my_pkg.my_module.MyWorkload``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.core.batch import model_loss, split_batch
from autotune.core.stages import Stage, StagedDataset
from autotune.core.tokens import count_tokens


class WorkloadError(ValueError):
    """A workload could not be loaded or built; the message names what is wrong."""


class Workload:
    """Base class for a trainable workload.

    A loader batch is a pair ``(inputs, targets)`` or a Mapping of model inputs (labels inside,
    targets ``None``); either side may be a tensor or any nesting of tuples, lists and dicts of
    them (see ``autotune.core.batch``). A Mapping is passed to the model as ``model(**inputs)``.

    Input pipelines in stages (``autotune/core/stages.py``): implement ``raw_dataset()`` (raw items, e.g.
    uint8 images or encoded bytes) and ``stages()`` (decode, resize, to float, normalize...,
    each with a per-sample host version and, where it can run on a batch, a device version);
    the ``transform_split`` knob then chooses how many stages run on the host before the copy.

    The older two-way split still works: set ``splits_transform = True``, and
    ``dataset("uint8")`` yields raw uint8 inputs that ``device_transform`` finishes on the
    device (the ``transfer_dtype`` knob), so a 4x smaller batch crosses the bus.
    """

    name: str = "workload"
    #: Knob values of the user's current setup: trial 0 (the baseline) runs exactly these.
    #: One key is not a knob: ``"grad_accum"``, the gradient-accumulation steps the user trains
    #: with (default 1). With it the study keeps the user's global batch (``batch_size`` x
    #: ``grad_accum`` per rank) as the unit of training: a trial's ``batch_size`` is a
    #: micro-batch, accumulated to that global batch where it divides it
    #: (autotune/core/global_batch.py), and best.yaml's ``grad_accum`` says how many.
    defaults: dict[str, Any] = {}
    splits_transform: bool = False
    #: 4-D image inputs, so channels_last can apply.
    image_inputs: bool = False
    #: Every batch has the same shapes (the loader drops the last partial batch), so CUDA Graphs
    #: and compile's reduce-overhead can replay one captured step.
    static_shapes: bool = True
    #: Knobs this workload's framework cannot express, narrowed to what it can:
    #: ``{knob: (allowed values, why)}``. The adapters use it so that the study never picks a
    #: configuration their export could not hand back (e.g. CUDA Graphs for Lightning's loop).
    knob_limits: dict[str, tuple[list[Any], str]] = {}
    #: Its batches are padded sequences: the model computes padding tokens (an
    #: ``attention_mask`` with zeros, or labels ignored on each row's trailing padding:
    #: ``core/tokens.py``), so length grouping and padding-free packing can remove them. None:
    #: read from a few of its batches, whatever function or class collates them, when the
    #: study's knobs are set up (``core/domains.padded``); the adapters read theirs when built.
    pads_batches: bool | None = None
    #: Its collate function takes a ``pad_to_multiple_of`` setting (transformers' padding
    #: collators): the knob of that name applies (the value in ``defaults`` is the user's own).
    #: None: looked up on ``collate_fn()``.
    pads_to_multiple: bool | None = None
    #: Attention implementations its model can be switched to (``core/sequences.py``): for a
    #: Hugging Face model the ``attn_implementation`` values it supports; ``("sdpa",)`` for a
    #: plain model that calls ``scaled_dot_product_attention`` itself (then SDPA's backend is
    #: the knob). Empty: the attention is the model's own code, not a knob.
    attention_choices: tuple[str, ...] = ()
    #: Its attention dropout in training (CPU flash attention refuses any).
    attention_dropout: float = 0.0
    #: Module types to wrap for activation checkpointing (a Hugging Face model that supports
    #: it needs none: its own switch is used). With neither, the knob is fixed off.
    checkpoint_layers: tuple[type, ...] = ()
    #: Module types that are the model's blocks for sharding (``sharding`` other than
    #: no_shard: ``fully_shard`` on each, then on the root; core/sharding.py). Empty: the
    #: ``checkpoint_layers``, else a Hugging Face model's ``_no_split_modules``, else the root
    #: alone (one all-gather group: neither the memory saving nor the overlap).
    shard_layers: tuple[type, ...] = ()
    #: Why its framework cannot shard the model on the CPU (the Hugging Face Trainer's
    #: accelerate runs DDP on CPU ranks): ``sharding`` then stays no_shard there. None: it can.
    cpu_sharding: str | None = None
    #: It can switch activation checkpointing on (set by the Hugging Face adapter).
    checkpointable: bool = False
    #: Its padding collator can be replaced by padding-free packing (one row per batch, each
    #: sample's positions restarting): its model's attention keeps samples apart given
    #: ``position_ids`` (core/sequences.packed_sequences_supported).
    packs_sequences: bool = False
    #: Why trials cannot run this workload as DDP ranks (launch.nproc_per_node > 1) yet; None:
    #: they can (autotune wraps the model in DDP, core/distributed.py).
    not_launchable: str | None = None
    #: How ``autotune verify`` runs this workload's production path, one side of its A/B
    #: rounds: a module with ``main()`` (autotune/production/verify.py). By default the runtime
    #: API around the workload's own objects (autotune/production/parity.py); the adapters
    #: run their framework's real Trainer.
    verifier: str = "autotune.production.parity"
    #: Clip the gradients' total norm to this before each optimizer step (your loop's
    #: ``clip_grad_norm_``), or None. ``Training`` clips after GradScaler unscales them and
    #: before the step, as PyTorch's AMP recipe orders it: a hook on the optimizer cannot,
    #: since a fused optimizer unscales inside its own step, after any pre-step hook ran
    #: (https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping).
    max_grad_norm: float | None = None
    #: Or clip each gradient element to +-this (``clip_grad_value_``: Lightning's
    #: ``gradient_clip_algorithm="value"``), after the unscale likewise; None: not.
    clip_grad_value: float | None = None

    def dataset(self, transfer_dtype: str) -> Dataset:
        """The training data as ``(inputs, target)`` items. A staged workload need not
        implement it: by default its source with every stage run on the host."""
        if self.stages():
            return StagedDataset(self.raw_dataset(), self.stages())
        raise NotImplementedError

    def collate_fn(self) -> Callable[[list[Any]], Any] | None:
        """How the loader merges samples into a batch (e.g. a Hugging Face data collator).
        Default: None, PyTorch's ``default_collate``."""
        return None

    def sample_lengths(self) -> list[int] | None:
        """Each training sample's length in tokens, for the ``length_grouping`` knob. Default:
        None (the samples are not variable-length sequences)."""
        return None

    def raw_dataset(self) -> Dataset:
        """Staged workloads: the raw ``(inputs, target)`` items the first stage reads."""
        raise NotImplementedError

    def stages(self) -> list[Stage]:
        """Staged workloads: the input pipeline, in order (see ``autotune.core.stages.Stage``).
        Default: none (the knob ``transform_split`` is then fixed)."""
        return []

    def device_transform(self, inputs: torch.Tensor) -> torch.Tensor:
        """Finish on the device what ``dataset("uint8")`` left undone. Default: nothing."""
        return inputs

    def model(self) -> nn.Module:
        raise NotImplementedError

    def ddp_arguments(self, model: nn.Module, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """DistributedDataParallel arguments beyond the DDP knobs that this workload's own
        framework passes under torchrun (the Hugging Face Trainer's ``find_unused_parameters``
        rule), so a trial's ranks wrap the model as the user's run does. Default: none
        (DDP's defaults, as a plain script and Lightning's DDPStrategy have them)."""
        return {}

    def split_batch(self, batch: Any) -> tuple[Any, Any]:
        """``(inputs, targets)`` of one loader batch. Default: a pair as it is, a Mapping as
        the inputs with no targets. Override for another layout."""
        return split_batch(batch)

    def tokens(self, inputs: Any) -> tuple[int, int] | None:
        """``(real, computed)`` tokens of one batch's inputs (host side, before the copy), or
        None: this workload has no tokens and its throughput is in samples/s. Real tokens are
        the non-padding ones, counted alike under padding, length grouping and packing;
        computed ones are every position the model runs, padding included. With tokens the
        study's objective is real tokens/s (autotune/core/tokens.py). Default: Hugging Face
        inputs (a Mapping with ``input_ids``; ``attention_mask`` marks the real ones).
        Override for another layout, e.g. ``every_id_real(inputs)`` for fixed-length ids."""
        count = count_tokens(inputs)
        return None if count is None else (count.real, count.computed)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        """Default: the loss the model computed itself (``outputs.loss`` or
        ``outputs["loss"]``, as a Hugging Face model given labels returns)."""
        return model_loss(outputs)

    def optimizer(self, params: Iterable[nn.Parameter], **impl: Any) -> torch.optim.Optimizer:
        """Build the optimizer; pass ``**impl`` on (it carries foreach= / fused=).

        A hook that names a ``model`` parameter, ``optimizer(self, params, model, **impl)``,
        is given the model being trained too (placed, sharded where measured; a DDP wrapper's
        inner module), for an optimizer the model builds itself with parameter groups
        (nanoGPT's ``model.configure_optimizers(...)``, which takes no ``**impl``). Apply the
        flags to what it returns with ``autotune.apply_optimizer_impl(opt, **impl)``: it sets
        them in every group (each group's own ``fused``/``foreach`` key overrides a
        constructor argument), as ``Runtime.apply_optimizer`` does in the production loop."""
        raise NotImplementedError

    def cpu_sized(self) -> Workload:
        """A smaller copy for CPU runs when the user set no sizes. Default: unchanged."""
        return self

    def describe(self) -> str:
        return self.name

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Extra files written beside best.yaml for this workload's framework, as
        ``{file name: plain YAML document}`` built from best.yaml's document. Default: none;
        the Lightning and Hugging Face adapters write their Trainer / TrainingArguments forms."""
        return {}


def build_optimizer(workload: Workload, model: nn.Module, **impl: Any) -> torch.optim.Optimizer:
    """The workload's optimizer over ``model``'s parameters, the model itself given where its
    ``optimizer`` hook names a ``model`` parameter (hooks written before it existed pass
    ``**impl`` straight to a constructor, which would refuse a ``model=``)."""
    try:
        wants_model = "model" in inspect.signature(workload.optimizer).parameters
    except (TypeError, ValueError):
        wants_model = False
    if not wants_model:
        return workload.optimizer(model.parameters(), **impl)
    inner = getattr(model, "module", model)  # DDP's: the user's module, with its methods
    return workload.optimizer(model.parameters(), model=inner, **impl)


def resolve_target(target: str) -> Any:
    """Import ``package.module.attr``; raise WorkloadError naming what failed."""
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise WorkloadError(
            f"workload._target_={target!r} is not a dotted path; expected "
            "'package.module.Factory', e.g. 'autotune.workloads.resnet18.ResNet18Workload'."
        )
    if module_name.split(".")[0] == "workloads" and importlib.util.find_spec("workloads") is None:
        # Studies stored before the shipped workloads moved inside the package name them
        # ``workloads.<name>``: resuming or comparing with one still finds them.
        module_name = "autotune." + module_name
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise WorkloadError(
            f"workload._target_={target!r}: importing module {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}. Check that the package is installed or on PYTHONPATH."
        ) from exc
    if not hasattr(module, attr):
        public = sorted(n for n in dir(module) if not n.startswith("_"))
        raise WorkloadError(
            f"workload._target_={target!r}: module {module_name!r} has no attribute {attr!r}. "
            f"It defines: {', '.join(public) or 'nothing public'}."
        )
    return getattr(module, attr)


def build_workload(spec: dict[str, Any]) -> Workload:
    """Instantiate a workload from its config node (``_target_`` + keyword arguments).

    Done by hand rather than with ``hydra.utils.instantiate`` so that a wrong argument name is
    reported with the factory's real parameter list instead of a nested Hydra traceback.
    """
    spec = dict(spec)
    target = spec.pop("_target_", None)
    if not target:
        raise WorkloadError(
            "The workload config has no _target_. Pick a shipped one (workload=mlp, "
            "workload=resnet18, workload=gpt) or set workload._target_=package.module.Factory."
        )
    factory = resolve_target(str(target))
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        valid = [n for n in sig.parameters if n != "self"]
        unknown = [k for k in spec if k not in valid]
        if unknown and not accepts_any:
            raise WorkloadError(
                f"workload {target}: unknown argument(s) {', '.join(unknown)}. "
                f"Valid arguments: {', '.join(valid) or 'none'}."
            )
    try:
        workload = factory(**spec)
    except Exception as exc:  # noqa: BLE001
        raise WorkloadError(
            f"workload {target} raised while being built: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {target} returned {type(workload).__name__}, not an "
            "autotune.Workload subclass instance."
        )
    return workload


def workload_name(spec: dict[str, Any]) -> str:
    """A short name for study naming, without importing the workload."""
    target = str(spec.get("_target_", "workload"))
    return str(spec.get("name") or target.rpartition(".")[0].rpartition(".")[2] or target)
