"""TRL's ``SFTTrainer`` through ``hf.tune``: its step as SFTTrainer takes it, its packing knobs as
SFTConfig's fields, its Trainer rebuilt as it was for ``autotune verify``.

An SFTTrainer is a Trainer whose dataset it prepared itself (tokenized, truncated to
``max_length``, labels -100 on the prompt for ``completion_only_loss``, packed for ``packing``:
all of it in the train dataset the trials receive) and whose step differs in two ways the
trials reproduce: the model has TRL's fused LM head (``add_fused_lm_head``: the loss from
per-token log-probabilities computed in chunks, never the whole logits) called with
``fused_lm_head=True`` and no cache, and each micro-batch reads its entropy, token accuracy and
token count back to the host (``SFTTrainer.compute_loss``'s metrics: a device sync each).

Packing. TRL's collator (``trl.trainer.sft_trainer.DataCollatorForLanguageModeling``) packs a
batch itself when ``padding_free`` is on (one row, positions restarting per sample); the
``padding_free`` knob switches that collator's field (core/sequences.collator) and exports as
``SFTConfig.padding_free``. It stays as the user has it where TRL decides it: BFD packing
(``packing=True``, strategy ``bfd``) packs rows only its padding-free collator keeps apart; with
``max_length`` set and packing off TRL refuses ``padding_free=True``. With a collator of the
user's own, SFTConfig's ``padding_free`` is not theirs to set (TRL refuses it beside a
collator): the knob is then the Trainer's (``DataCollatorWithFlattening``), and so is the export.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from autotune.adapters import best_document
from autotune.adapters.hf.recipe import fused_head, split_peft
from autotune.adapters.hf.workload import HFTrainerWorkload

#: SFTConfig's own fields the trials' workload reads (the rest of the user's SFTConfig goes
#: to verify's SFTTrainer as it is).
SFT_FIELDS = ("packing", "packing_strategy", "padding_free", "max_length",
              "completion_only_loss")


def is_sft(trainer: Any) -> bool:
    """An instance of TRL's SFTTrainer (or a subclass), found without importing TRL."""
    return any(c.__name__ == "SFTTrainer" and c.__module__.startswith("trl.")
               for c in type(trainer).__mro__)


def trl_collator(collate: Any) -> bool:
    """TRL's own language-modeling collator: its ``padding_free`` packs batches."""
    return (dataclasses.is_dataclass(collate) and hasattr(collate, "padding_free")
            and type(collate).__module__.startswith("trl."))


def sft_parts(trainer: Any) -> dict[str, Any]:
    """What of an SFTTrainer its workload and verify need beside a Trainer's."""
    args = trainer.args
    sft = {k: getattr(args, k, None) for k in SFT_FIELDS}
    sft["padding_free_effective"] = bool(getattr(trainer, "padding_free", args.padding_free))
    sft["trl_collator"] = trl_collator(trainer.data_collator)
    sft["fused_head"] = fused_head(split_peft(trainer.model)[1]) is not None
    return {"sft": sft, "processing_class": trainer.processing_class}


def padding_free_limit(sft: dict[str, Any]) -> tuple[list[Any], str] | None:
    """The ``padding_free`` knob held where TRL decides it (module docstring), else None."""
    own = bool(sft["padding_free_effective"])
    if sft["packing"] and sft["packing_strategy"] in ("bfd", "bfd_split"):
        return [True], ("TRL's BFD packing (SFTConfig packing=True) fills rows whose samples "
                        "only its padding-free collator keeps apart")
    if sft["trl_collator"] and not sft["packing"] and sft["max_length"] is not None and not own:
        return [own], ("TRL refuses SFTConfig padding_free=True with max_length set and packing "
                       "off (max_length=None on data you truncated yourself lets it be searched)")
    return None


class SFTTrainerWorkload(HFTrainerWorkload):
    """A live SFTTrainer's objects (``hf.tune(sft_trainer)``): an HFTrainerWorkload whose step
    is SFTTrainer's (module docstring) and whose export is an SFTConfig's fields."""

    def __init__(self, objects: str, name: str = "hf-sft", static_shapes: bool | None = None):
        super().__init__(objects, name, static_shapes)
        self.sft = dict(self.shipped["sft"])
        limit = padding_free_limit(self.sft)
        if limit is not None:
            self.knob_limits = {**self.knob_limits, "padding_free": limit}

    def model(self) -> nn.Module:
        """The user's model, called as SFTTrainer.compute_loss calls it: ``fused_lm_head=True``
        (where TRL's fused head is on it) and ``use_cache=False``."""
        model = super().model()
        extra = {"use_cache": False, **({"fused_lm_head": True} if self.sft["fused_head"] else {})}

        def as_sft_trainer(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> Any:
            self._tokens = batch_tokens(kwargs)
            return args, {**kwargs, **extra}

        model.register_forward_pre_hook(as_sft_trainer, with_kwargs=True)
        return model

    def loss(self, outputs: Any, targets: Any) -> Any:
        """The fused head's loss, and SFTTrainer's per-micro-batch metrics read to the host
        as it reads them: entropy, token accuracy and the batch's token count, each a device
        sync, each gathered over the ranks first (``accelerator.gather_for_metrics``)."""
        loss = super().loss(outputs, targets)
        mask = getattr(outputs, "label_mask", None)
        if mask is not None:
            valid = gathered(mask.sum())
            for field in ("entropy", "is_top1"):
                value = getattr(outputs, field, None)
                if value is not None and valid > 0:
                    (gathered(value.detach().sum()) / valid).item()
        tokens = getattr(self, "_tokens", None)
        if tokens is not None:  # the run's token count, read each micro-batch
            gathered(tokens).item()
        return loss

    def describe(self) -> str:
        return f"hf SFTTrainer: {self.model_path} on {self.dataset_path}"

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """training_args.yaml as SFTConfig fields: TrainingArguments' and ``padding_free``
        (TRL's collator packs: no collator to name in model_settings.yaml)."""
        out = super().framework_exports(best)
        knobs = best_document(best)["knobs"]
        if "padding_free" in knobs:
            out["training_args.yaml"]["padding_free"] = bool(knobs["padding_free"])
            settings = out.get("model_settings.yaml", {})
            settings.pop("data_collator", None)
            if not settings:
                out.pop("model_settings.yaml", None)
        return out


def batch_tokens(inputs: dict[str, Any]) -> Any:
    """The tokens SFTTrainer counts for a micro-batch (``_total_train_tokens``): the attention
    mask's sum, or a padding-free batch's row length; None where it counts none."""
    mask, positions = inputs.get("attention_mask"), inputs.get("position_ids")
    if mask is not None:
        return mask.sum()
    if positions is not None:
        return torch.tensor(positions.size(1), device=positions.device)
    return None


def gathered(value: Any) -> Any:
    """``value`` summed over the ranks as ``gather_for_metrics(value).sum()`` sums it (an
    all-gather of every rank's scalar); itself in one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    parts = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, value.contiguous())
    return torch.stack(parts).sum()


class SFTOwnCollatorWorkload(SFTTrainerWorkload):
    """An SFTTrainer given a data collator of the user's own: SFTConfig's ``padding_free`` is
    not theirs to set (TRL refuses it with a collator), so the export is a Trainer's: packing,
    where listed and chosen, names ``DataCollatorWithFlattening`` in model_settings.yaml."""

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return HFTrainerWorkload.framework_exports.__func__(cls, best)  # type: ignore[attr-defined]
