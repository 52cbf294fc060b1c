"""The GPU knobs of language-model fine-tuning: Liger's kernels (``liger_kernel``), flash
attention with padding-free packing (``attention=flash_attention_2``, ``padding_free``) and the
checkpointing implementation (``checkpoint_reentrant``, the user's use_reentrant). Each is
classed in the registry, refused on the CPU with its reason, and exported or applied where
chosen; the CUDA paths are gpu-marked (skipped without a GPU)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from autotune.core.env import Env
from autotune.core.knobs import BY_NAME, KnobError
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import build_workload

transformers = pytest.importorskip("transformers")

from autotune.adapters.hf.workload import (  # noqa: E402
    model_settings,
    training_arguments_kwargs,
)
from autotune.core import llm_kernels  # noqa: E402

TINY_LLAMA = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 64}
SPEC = {"_target_": "autotune.adapters.hf.HFWorkload", "model": "transformers.LlamaForCausalLM",
        "config": "transformers.LlamaConfig", "config_args": TINY_LLAMA,
        "dataset": "examples.hf_tune.tokens",
        "dataset_args": {"n": 64, "seq_len": 16, "vocab_size": 128}}


def llama(**args: Any) -> Any:
    return build_workload({**SPEC, "training_args": {"per_device_train_batch_size": 4, **args}})


def export(knobs: dict[str, Any]) -> dict[str, Any]:
    return training_arguments_kwargs({"knobs": knobs, "device": {"type": "cpu"}})


def padded_texts(n: int = 64) -> Any:
    """Texts of 4 to 32 tokens: batches padded to their longest (examples/hf_lm.py's)."""
    from examples.hf_lm import Texts, tokenizer

    return Texts(tokenizer(), n=n, min_len=4, max_len=32)


def cuda_env(cpu_env: Env) -> Env:
    """This machine's facts with a CUDA device: the domains' rules for a GPU, nothing run."""
    return replace(cpu_env, device="cuda", cuda_capability=(9, 0), gpu_count=1, bf16=True)


def test_the_knobs_are_classed() -> None:
    assert BY_NAME["liger_kernel"].effect == "numerics"
    assert BY_NAME["optimizer"].effect == "numerics"
    assert BY_NAME["checkpoint_reentrant"].effect == "speed"
    assert BY_NAME["padding_free"].effect == "numerics"


def test_liger_is_refused_on_the_cpu_with_its_reason(cpu_env: Env) -> None:
    wl = llama(use_liger_kernel=True)
    assert wl.defaults["liger_kernel"] is True and wl.model_type == "llama"
    space = build_space(cpu_env, wl, {})
    value, why = space.fixed["liger_kernel"]
    assert value is False and "CUDA" in why
    with pytest.raises(KnobError, match="liger_kernel.*Triton kernels for CUDA"):
        build_space(cpu_env, wl, {"liger_kernel": True})
    # A GPU without the package: refused, saying what to install.
    if not llm_kernels.liger_installed():
        with pytest.raises(KnobError, match="pip install liger-kernel"):
            build_space(cuda_env(cpu_env), wl, {"liger_kernel": True})


def test_liger_is_exported_where_chosen(cpu_env: Env) -> None:
    knobs = build_space(cpu_env, llama(), {}).baseline
    assert export(knobs)["use_liger_kernel"] is False
    assert export({**knobs, "liger_kernel": True})["use_liger_kernel"] is True
    args = transformers.TrainingArguments(output_dir="/tmp/x", **{
        k: v for k, v in export({**knobs, "liger_kernel": True}).items() if k != "use_cpu"})
    assert args.use_liger_kernel is True


def test_a_plain_model_has_no_liger(cpu_env: Env) -> None:
    wl = build_workload({"_target_": "autotune.workloads.mlp.MLPWorkload"})
    why = build_space(cuda_env(cpu_env), wl, {}).fixed["liger_kernel"][1]
    assert "model is not one" in why


def test_flash_attention_2_is_refused_on_the_cpu_with_its_reason(cpu_env: Env) -> None:
    wl = llama()
    assert "flash_attention_2" in wl.attention_choices
    dom = build_space(cpu_env, wl, {}).domains["attention"]
    assert "flash_attention_2" not in dom.values
    assert "flash_attention_2 (needs CUDA and the flash-attn package)" in (dom.reason or "")
    with pytest.raises(KnobError, match="flash-attn package"):
        build_space(cpu_env, wl, {"attention": "flash_attention_2"})


def test_flash_attention_with_padding_free_is_exported_together() -> None:
    """Where chosen: the model built with flash_attention_2, its batches packed in one row
    (the collator that gives flash attention each sample's positions, cu_seqlens from them),
    the cache off so packed samples stay apart."""
    out = model_settings({"knobs": {"attention": "flash_attention_2", "padding_free": True}})
    assert out["attn_implementation"] == "flash_attention_2" and "sdpa_backend" not in out
    assert "DataCollatorWithFlattening(return_position_ids=True" in out["data_collator"]
    assert out["use_cache"] is False


@pytest.mark.parametrize("given,reentrant", [
    (None, False), ({"use_reentrant": False}, False), ({"use_reentrant": True}, True)])
def test_the_users_use_reentrant_is_kept_applied_and_exported(
        given: dict[str, Any] | None, reentrant: bool, cpu_env: Env) -> None:
    wl = llama(gradient_checkpointing=True, gradient_checkpointing_kwargs=given)
    space = build_space(cpu_env, wl, {})
    assert space.baseline["activation_checkpointing"] is True
    assert space.baseline["checkpoint_reentrant"] is reentrant
    assert space.domains["checkpoint_reentrant"].values == [reentrant]
    run = Training(wl, space.baseline, "cpu")
    layer = run.model.model.layers[0]
    assert layer._gradient_checkpointing_func.keywords == {"use_reentrant": reentrant}
    loss = run.step(*run.to_device(next(iter(run.loader)), None))
    assert torch.isfinite(loss)
    fields = export(space.baseline)
    assert fields[next(k for k in fields if k.endswith("checkpointing_kwargs"))] == {
        "use_reentrant": reentrant}
    # Both are searched where listed.
    listed = build_space(cpu_env, wl, {"checkpoint_reentrant": [False, True]})
    assert listed.domains["checkpoint_reentrant"].values == [False, True]


@pytest.mark.gpu
def test_liger_kernels_patch_the_model_and_train_on_cuda(cpu_env: Env) -> None:
    pytest.importorskip("liger_kernel")
    wl = llama(bf16=True)
    knobs = {**build_space(cuda_env(cpu_env), wl, {}).baseline, "liger_kernel": True,
             "amp": "bf16"}
    run = Training(wl, knobs, "cuda")
    assert any("Liger" in type(m).__name__ for m in run.model.modules())
    loss = run.step(*run.to_device(next(iter(run.loader)), None))
    assert torch.isfinite(loss)


@pytest.mark.gpu
def test_flash_attention_2_with_padding_free_trains_on_cuda(cpu_env: Env) -> None:
    pytest.importorskip("flash_attn")
    wl = build_workload({**SPEC, "config_args": {**TINY_LLAMA, "vocab_size": 512},
                         "dataset": "tests.test_llm_knobs.padded_texts",
                         "dataset_args": {"n": 64}, "collator": "examples.hf_lm.pad_collate",
                         "training_args": {"per_device_train_batch_size": 4, "bf16": True}})
    space = build_space(cuda_env(cpu_env), wl, {"padding_free": [False, True]})
    assert "flash_attention_2" in space.domains["attention"].values
    knobs = {**space.baseline, "attention": "flash_attention_2", "padding_free": True,
             "amp": "bf16"}
    run = Training(wl, knobs, "cuda")
    assert run.model.config._attn_implementation == "flash_attention_2"
    loss = run.step(*run.to_device(next(iter(run.loader)), None))
    assert torch.isfinite(loss)
