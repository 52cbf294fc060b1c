"""Tokens as the unit (issue 31 parts 2 and 3), on real objects: the real Hugging Face
collators over the same variable-length samples, a tiny LlamaForCausalLM built from its config,
transformers' LengthGroupedSampler, and autotune's own measured window run in this process.
No timing is asserted: only counts, units and which batches a window saw."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from autotune.core.config import WindowConfig
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.tokens import (
    TOKENS,
    CrossUnit,
    TokenCount,
    count_tokens,
    every_id_real,
    same_unit,
)
from autotune.core.training import Training
from autotune.measure.batches import Batches, length_group_steps
from autotune.measure.clock import Clock
from autotune.measure.contention import snapshot
from autotune.measure.figures import summarize
from autotune.measure.loop import measured_loop
from autotune.measure.protocol import WindowResult
from autotune.measure.readings import Progress
from autotune.measure.window import warm_up
from tests.workloads_tokens import TinyLlamaLM, Tokens, collator, samples

BATCH = 4


def _epoch(kind: str, items: list[dict[str, Any]], order: list[int]) -> list[TokenCount]:
    """Each batch's tokens when ``items`` go through collator ``kind`` in ``order``."""
    collate = collator(kind)
    out = []
    for i in range(0, len(order) - len(order) % BATCH, BATCH):
        count = count_tokens(collate([items[j] for j in order[i:i + BATCH]]))
        assert count is not None
        out.append(count)
    return out


def _share(counts: list[TokenCount]) -> float:
    return 1 - sum(c.real for c in counts) / sum(c.computed for c in counts)


def test_same_samples_give_the_same_real_tokens_under_every_collator() -> None:
    """Padding, padding to 64, the LM collator, length-grouped batches and padding-free
    packing: one real-token count; the padding share falls from pad64 to none."""
    items = samples(64)
    lengths = [len(s["input_ids"]) for s in items]
    shuffled = torch.randperm(len(items), generator=torch.Generator().manual_seed(0)).tolist()
    grouped = list(LengthGroupedSampler(BATCH, lengths=lengths,
                                        generator=torch.Generator().manual_seed(0)))
    epochs = {"pad": _epoch("pad", items, shuffled), "pad64": _epoch("pad64", items, shuffled),
              "lm": _epoch("lm", items, shuffled), "flatten": _epoch("flatten", items, shuffled),
              "grouped": _epoch("pad", items, grouped)}
    for name, counts in epochs.items():
        assert sum(c.real for c in counts) == sum(lengths), name
    shares = {name: _share(counts) for name, counts in epochs.items()}
    assert shares["flatten"] == 0.0
    assert shares["lm"] == pytest.approx(shares["pad"])  # both pad to the batch's longest
    assert 0.0 < shares["grouped"] < shares["pad"] < shares["pad64"]
    # A padded batch computes each sample at the batch's longest; pad64 rounds that up.
    first = [items[j]["input_ids"] for j in shuffled[:BATCH]]
    assert epochs["pad"][0].computed == BATCH * max(map(len, first))
    assert epochs["pad64"][0].computed == BATCH * 64 * math.ceil(max(map(len, first)) / 64)


def test_count_rules() -> None:
    """No input_ids: no tokens (samples/s); no mask: every id real; a declared rule."""
    assert count_tokens(torch.zeros(2, 3)) is None
    assert count_tokens({"pixel_values": torch.zeros(2, 3)}) is None
    ids = torch.ones(2, 5, dtype=torch.long)
    assert count_tokens({"input_ids": ids}) == TokenCount(10, 10)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert count_tokens({"input_ids": ids, "attention_mask": mask}) == TokenCount(8, 10)
    assert TokenCount(8, 10).padding_share == pytest.approx(0.2)
    assert every_id_real(ids) == (10, 10)
    assert TinyLlamaLM().tokens({"input_ids": ids, "attention_mask": mask}) == (8, 10)


def test_units_never_mix() -> None:
    assert same_unit(None, "samples/s", "x") == "samples/s"  # a study before units: samples/s
    with pytest.raises(CrossUnit, match="tokens/s and the other in samples/s"):
        same_unit("tokens/s", None, "this study against 'night1'")


def _window(run: Training, win: WindowConfig) -> tuple[WindowResult, Batches]:
    """A real warm-up and measured window of ``run``, in this process (no ceilings)."""
    batches, clock, progress = Batches(run), Clock(run.device), Progress(None)
    result = WindowResult()
    warm_up(run, batches, clock, win, progress, result)
    loop = measured_loop(run, batches, clock, win, progress, BATCH, snapshot())
    summarize(result, loop, clock, progress, BATCH, 0)
    return result, batches


WIN = WindowConfig(warmup_steps=2, measure_steps=4, min_measure_steps=2, measure_seconds=0.01,
                   min_measure_seconds=0.0)


@pytest.mark.parametrize("kind", ["lm", "flatten"])
def test_window_of_a_real_model_measures_real_tokens_per_second(cpu_env: Env, kind: str) -> None:
    """The objective's unit is tokens/s; its figure is the window's real tokens over its time;
    the padding share is the padded collator's, none when packed."""
    wl = TinyLlamaLM(collate=kind, batch_size=BATCH)
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    result, _ = _window(run, WIN)
    assert result.unit == TOKENS and result.rate == result.tokens_per_sec
    assert result.tokens_per_sec == pytest.approx(result.tokens / result.measure_s)
    assert result.samples == result.steps * BATCH
    assert result.chunks and all(c > 0 for c in result.chunks)  # pruned on tokens/s too
    if kind == "flatten":
        assert result.tokens == result.tokens_computed and result.padding_share == 0.0
    else:
        assert result.tokens < result.tokens_computed
        assert result.padding_share == pytest.approx(1 - result.tokens / result.tokens_computed)
        assert 0 < result.padding_batches["mean"] <= result.padding_batches["max"] < 1


def test_length_grouped_window_spans_whole_mega_batches(cpu_env: Env) -> None:
    """Each mega-batch of a length-grouped sampler is sorted longest first: the window starts
    at one's start and ends at one's end, so it sees a uniform draw of the dataset's lengths,
    not the short tail that follows a warm-up (issue 31 part 3)."""
    wl = TinyLlamaLM(n=256, collate="lm", batch_size=BATCH)
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    items = samples(256)
    lengths = [len(s["input_ids"]) for s in items]
    run.loader = DataLoader(Tokens(items), batch_size=BATCH, drop_last=True,
                            collate_fn=collator("lm"),
                            sampler=LengthGroupedSampler(BATCH, lengths=lengths,
                                                         generator=torch.Generator().manual_seed(0)))
    group = length_group_steps(run.loader)
    assert group == 256 // (BATCH * 4)  # transformers' own mega_batch_mult
    result, batches = _window(run, WIN)
    assert result.steps == group and result.length_groups == {"group_steps": group, "groups": 1}
    assert batches.in_epoch == 2 * group  # warm-up ran to the first group's end
    order = get_length_grouped_indices(lengths, BATCH, generator=torch.Generator().manual_seed(0))
    per_group = group * BATCH
    second = order[per_group:2 * per_group]
    assert result.tokens == sum(lengths[i] for i in second)  # exactly the second mega-batch
    # What an unaligned short window after 2 warm-up steps would have read instead: the
    # group's shorter half, below the group's mean length.
    tail = second[len(second) // 2:]
    assert sum(lengths[i] for i in tail) / len(tail) < sum(lengths[i] for i in second) / per_group


def test_a_plain_loader_has_no_groups(cpu_env: Env) -> None:
    wl = TinyLlamaLM(collate="pad", batch_size=BATCH)
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    assert length_group_steps(run.loader) == 1
