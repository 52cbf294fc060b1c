"""Padding read from the batches, whatever builds them: a plain ``collate(features)`` function,
a class of the user's without a ``pad_to_multiple_of`` setting, or a transformers collator.
Real objects throughout: a Llama-style decoder built from its config inside a real Trainer
(examples/hf_lm.py), a real tokenizer and transformers' collators; nothing downloaded."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from autotune.adapters import hf  # noqa: E402
from autotune.adapters.hf.workload import HFTrainerWorkload  # noqa: E402
from autotune.core import domains  # noqa: E402
from autotune.core.knobs import KnobError  # noqa: E402
from autotune.core.shipping import ship  # noqa: E402
from autotune.core.space import build_space  # noqa: E402
from autotune.core.tokens import count_tokens, has_padding  # noqa: E402
from autotune.workloads.mlp import MLPWorkload  # noqa: E402
from examples.hf_lm import pad_collate, users_trainer  # noqa: E402
from tests.conftest import scratch  # noqa: E402
from tests.workloads_tokens import TinyLlamaLM, collator, samples  # noqa: E402

BOTH = [False, True]


def labels_only_collate(features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A collator that pads ids with 0 to the batch's longest and marks the padding only in the
    labels (-100): no attention_mask (a causal model never attends forward to right padding)."""
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        ids[row, :n] = torch.tensor(f["input_ids"])
        labels[row, :n] = ids[row, :n]
    return {"input_ids": ids, "labels": labels}


class PadsWithoutTheSetting:
    """A collator class of the user's that pads, with no ``pad_to_multiple_of`` attribute."""

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return pad_collate(features)


def _trainer_workload(collate: Any, **data: Any) -> HFTrainerWorkload:
    """The HF adapter's workload from a real Trainer whose data_collator is ``collate``."""
    trainer = users_trainer(str(scratch()), **{"n": 32, "max_len": 48, **data}, layers=1,
                            hidden=32, collator="function")
    trainer.data_collator = collate
    parts = hf.trainer_parts(trainer)
    return HFTrainerWorkload(str(ship(parts.parts, scratch(), parts.names)))


def test_the_labels_say_where_a_batch_without_a_mask_is_padded() -> None:
    """Right padding read from trailing -100 labels counts the same real tokens as the
    attention mask does over the same samples; runs of one length in every row, or a packed
    batch, are no padding."""
    items = samples(16, seed=1)
    for i in range(0, 16, 4):
        by_mask = count_tokens(pad_collate(items[i:i + 4]))
        by_labels = count_tokens(labels_only_collate(items[i:i + 4]))
        assert by_mask is not None and by_labels is not None
        assert by_labels == by_mask and by_mask.real < by_mask.computed
    shifted = torch.randint(2, 100, (3, 8))
    shifted_labels = shifted.clone()
    shifted_labels[:, -1] = -100  # every row's last label ignored: a shift, not padding
    assert not has_padding({"input_ids": shifted, "labels": shifted_labels})
    packed = collator("flatten")(items[:4])
    assert "position_ids" in packed and not has_padding(packed)


def test_a_plain_function_collator_that_pads_opens_grouping_and_packing(cpu_env: Any) -> None:
    """The Hugging Face adapter reads the padding from the batches of a plain function, a
    class without the setting and transformers' own collator alike; pad_to_multiple_of is
    offered only where the collator takes it."""
    env = cpu_env
    for collate in (pad_collate, PadsWithoutTheSetting(), labels_only_collate):
        wl = _trainer_workload(collate)
        assert wl.pads_batches and wl.input_shapes["padded"] > 0, collate
        space = build_space(env, wl, {"length_grouping": BOTH, "padding_free": BOTH})
        assert space.domains["length_grouping"].values == BOTH
        assert space.domains["padding_free"].values == BOTH
        multiple = space.domains["pad_to_multiple_of"]
        assert multiple.values == [None] and "takes no pad_to_multiple_of" in str(multiple.reason)
        with pytest.raises(KnobError, match="pad_to_multiple_of"):
            build_space(env, wl, {"pad_to_multiple_of": [None, 8]})
    # A transformers padding collator takes the setting: the values listed are searched.
    from transformers import DataCollatorWithPadding

    from examples.hf_lm import tokenizer

    hf_pads = _trainer_workload(DataCollatorWithPadding(tokenizer()))
    assert hf_pads.pads_batches
    listed = build_space(env, hf_pads, {"pad_to_multiple_of": [None, 8]})
    assert listed.domains["pad_to_multiple_of"].values == [None, 8]


def test_batches_without_padding_are_not_padded_sequences(cpu_env: Any) -> None:
    """The same function over samples of one length: nothing to group or pack, and the
    domain says what the batches showed."""
    trainer_wl = _trainer_workload(pad_collate, min_len=16, max_len=16)
    assert trainer_wl.input_shapes["distinct"] == 1 and not trainer_wl.pads_batches
    dom = build_space(cpu_env, trainer_wl, {}).domains["length_grouping"]
    assert dom.values == [False] and "hold no padding" in str(dom.reason)
    with pytest.raises(KnobError, match="length_grouping"):
        build_space(cpu_env, trainer_wl, {"length_grouping": BOTH})


def test_a_plain_workload_is_read_from_its_own_batches() -> None:
    """A Workload subclass states nothing: its batches are read once, through its own
    collate_fn; one without a collate function is not read at all (default_collate stacks
    equal shapes)."""
    padded = TinyLlamaLM(n=32, collate="pad")
    assert padded.pads_batches is None
    assert domains.padded(padded) and padded.pads_batches is True
    assert domains.pads_to_multiple(padded)  # DataCollatorWithPadding takes the setting
    assert not domains.padded(TinyLlamaLM(n=32, collate="flatten"))

    class NoDataset(MLPWorkload):
        def dataset(self, transfer_dtype: str) -> Any:
            raise AssertionError("read without a collate function")

    assert not domains.padded(NoDataset())


def test_a_decoder_with_a_function_collator_is_tuned_in_tokens_with_its_padding(
        tmp_path: Path) -> None:
    """The adapter's study on a Trainer whose collator is a plain function that pads:
    grouping and packing listed are accepted and searched, every trial is in real tokens/s
    with its padding share in trials.csv, and the baseline's diagnosis names its padding."""
    from tests.conftest import BARE_ARGS

    trainer = users_trainer(str(tmp_path / "out"), n=64, max_len=48, layers=1, hidden=32,
                            collator="function")
    knobs = {"length_grouping": BOTH, "padding_free": BOTH, "num_workers": 0, "cpu_threads": 1}
    hf.tune(trainer, BARE_ARGS, device="cpu", n_trials=3,
            name="fn", out_dir=tmp_path / "studies", knobs=knobs)
    with open(tmp_path / "studies" / "fn" / "trials.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["state"] == "COMPLETE"]
    assert rows and all(r["unit"] == "tokens/s" and float(r["tokens_per_sec"]) > 0 for r in rows)
    baseline = rows[0]
    assert baseline["knob.length_grouping"] == "False" and baseline["knob.padding_free"] == "False"
    assert float(baseline["padding_share"]) > 0.1
    assert "of the tokens computed are padding" in baseline["diagnosis"]
    packed = [r for r in rows if r["knob.padding_free"] == "True"]
    assert packed and all(float(r["padding_share"]) == 0.0 for r in packed)



def test_a_framework_that_cannot_apply_grouping_refuses_it_when_listed(cpu_env: Any) -> None:
    """A workload's knob_limits (its framework's reach) bound the values a user may list for
    an opt-in knob too: the Lightning adapter keeps the DataModule's sampler, so a study that
    measured length grouping would export a configuration its Lightning export cannot apply."""
    from autotune.adapters.lightning.workload import LightningWorkload

    class Limited(TinyLlamaLM):
        knob_limits = {"length_grouping": LightningWorkload.knob_limits["length_grouping"]}

    assert build_space(cpu_env, TinyLlamaLM(n=32, collate="pad"), {"length_grouping": BOTH})
    with pytest.raises(KnobError, match="does not regroup batches by length"):
        build_space(cpu_env, Limited(n=32, collate="pad"), {"length_grouping": BOTH})
