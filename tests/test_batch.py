"""Batches of any structure: dicts and nested mixes reach the device whole, channels_last
applies inside them, an HF-style dict workload runs a study, variable shapes keep CUDA Graphs
out of the space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from autotune.core import batch as tree
from autotune.core.env import Env
from autotune.core.knobs import KnobError
from autotune.core.space import build_space
from autotune.core.training import Training
from tests.conftest import TINY_ARGS, ran_to_the_end, run_cli
from tests.workloads_batch import DictBatchLM, NestedWorkload, VariableShapeLM


def test_nested_structure_is_moved_whole() -> None:
    from transformers import BatchEncoding

    enc = BatchEncoding({"input_ids": torch.ones(2, 3, dtype=torch.long)}, n_sequences=2)
    batch = ({"image": torch.zeros(2, 3, 4, 4), "meta": [torch.ones(2), "tag", None]},
             (torch.zeros(2, dtype=torch.long), enc))
    moved = tree.move(batch, torch.device("meta"))
    assert all(t.device.type == "meta" for t in tree.tensors(moved))
    assert len(tree.tensors(moved)) == 4
    inputs, (labels, enc2) = moved
    assert inputs["meta"][1:] == ["tag", None]  # non-tensor leaves pass through
    assert type(enc2) is BatchEncoding and enc2.n_sequences == 2  # rebuilt as its own type
    assert enc["input_ids"].device.type == "cpu"  # the original is untouched


def test_channels_last_applies_inside_the_structure(cpu_env: Env) -> None:
    wl = NestedWorkload()
    knobs = {**build_space(cpu_env, wl, {}).baseline, "channels_last": True}
    run = Training(wl, knobs, "cpu")
    inputs, targets = run.to_device(*run.split(next(iter(run.loader))))
    prepared = run.prepare(inputs)
    assert prepared["image"].is_contiguous(memory_format=torch.channels_last)
    assert prepared["meta"][0].dim() == 2 and list(prepared["meta"][1]) == ["tag"] * 4
    loss = run.step(inputs, targets)
    assert torch.isfinite(loss) and run.model.seen_channels_last
    off = Training(wl, {**knobs, "channels_last": False}, "cpu")
    off.step(*off.to_device(*off.split(next(iter(off.loader)))))
    assert not off.model.seen_channels_last


def test_dict_batch_calls_model_with_mapping_and_uses_its_loss(cpu_env: Env) -> None:
    wl = DictBatchLM()
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    inputs, targets = run.split(next(iter(run.loader)))
    assert targets is None and set(inputs) == {"input_ids", "attention_mask", "labels"}
    before = [p.detach().clone() for p in run.model.parameters()]
    loss = run.step(*run.to_device(inputs, targets))
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, run.model.parameters(), strict=True))


def test_bad_batch_and_missing_loss_name_what_to_implement() -> None:
    with pytest.raises(ValueError, match="split_batch"):
        tree.split_batch((torch.ones(1), torch.ones(1), torch.ones(1)))
    with pytest.raises(NotImplementedError, match=r"Workload.loss\(outputs, targets\)"):
        tree.model_loss(torch.ones(2))
    assert tree.model_loss({"loss": torch.tensor(2.0)}).item() == 2.0


def cuda_env(**kw: Any) -> Env:
    """A description of a CUDA machine, for domain rules only (nothing runs on it)."""
    return Env(device="cuda", device_name="H100", total_memory_gb=80.0, cpu_count=16,
               cuda_capability=(9, 0), bf16=True, compiler=True, torch_version=torch.__version__,
               cuda_version="12.8", gpu_count=1, **kw)


def test_variable_shapes_never_get_cuda_graphs() -> None:
    space = build_space(cuda_env(), VariableShapeLM(), {})
    value, why = space.fixed["cuda_graphs"]
    assert value is False and "static shapes" in why
    values, why = space.narrowed["compile"]
    assert values == ["off", "default"] and "static shapes" in why
    for pin in ({"cuda_graphs": True}, {"compile": "reduce-overhead"}, {"compile": "max-autotune"}):
        with pytest.raises(KnobError, match="static shapes"):
            build_space(cuda_env(), VariableShapeLM(), pin)
    static = build_space(cuda_env(), DictBatchLM(), {})
    assert static.domains["cuda_graphs"].values == [False, True]
    assert "reduce-overhead" in static.domains["compile"].values


def test_dict_batch_workload_runs_a_study_and_exports(tmp_path: Path) -> None:
    proc = run_cli(["workload._target_=tests.workloads_batch.DictBatchLM", "device=cpu",
                    "study.n_trials=3", "study.name=dict", "study.confirm_top=1", *TINY_ARGS],
                   tmp_path)
    # A busy machine's exit 4 still exports (your configuration): the subject here is the
    # batch structure, not the measurement (a .ci/run beside other work, 2026-11-27).
    assert ran_to_the_end(proc.returncode, proc.stdout + proc.stderr), proc.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / "dict" / "best.yaml").read_text())
    assert best["metrics"]["samples_per_sec"] > 0 and best["workload"] == "dict-lm", best
    assert "crash" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.gpu
def test_pinned_dict_batches_reach_the_gpu(cpu_env: Env) -> None:
    from autotune.core.env import probe

    env = probe("cuda")
    wl = DictBatchLM()
    knobs = {**build_space(env, wl, {}).baseline, "pin_memory": True, "non_blocking": True,
             "cuda_graphs": True}
    run = Training(wl, knobs, "cuda")
    inputs, targets = run.split(next(iter(run.loader)))
    assert all(t.is_pinned() for t in tree.tensors(inputs))
    for _ in range(3):
        loss = run.step(*run.to_device(inputs, targets))
    assert torch.isfinite(loss)
