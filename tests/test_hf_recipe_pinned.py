"""A model sent as its recipe is rebuilt from the checkpoint the user loaded, whatever the
trial's working directory and whatever the Hub cache holds by then (issue 70 item 6): the
recipe keeps the checkpoint's folder as an absolute path (a Hub model's snapshot at the commit
from_pretrained read), and each build reads it with ``local_files_only``, so no trial reaches
the network. A real Hub cache layout, built here (nothing is downloaded)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from transformers import LlamaForCausalLM  # noqa: E402

from autotune.adapters.hf.recipe import DTYPE_KEYWORD, recipe_of  # noqa: E402
from examples.hf_sft_lora import save_llama  # noqa: E402

COMMITS = ("a" * 40, "b" * 40)


def _hub_cache(root: Path) -> Path:
    """``acme/tiny`` in a Hub cache at two commits, ``refs/main`` on the first: what a
    downloaded model looks like in ~/.cache/huggingface/hub (its weights differ by seed)."""
    repo = root / "models--acme--tiny"
    for seed, commit in enumerate(COMMITS):
        save_llama(repo / "snapshots" / commit, seed=seed)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMITS[0])
    return repo


def _weight(model: torch.nn.Module) -> torch.Tensor:
    return model.get_input_embeddings().weight.detach().clone()


def test_a_hub_model_is_rebuilt_offline_from_the_revision_it_was_loaded_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    repo = _hub_cache(tmp_path / "hub")
    # The cache's place and offline mode, as HF_HUB_CACHE and HF_HUB_OFFLINE set them when
    # huggingface_hub is imported (it reads them once, at import).
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = LlamaForCausalLM.from_pretrained("acme/tiny")
    recipe, why = recipe_of(model)
    assert recipe is not None, why
    assert recipe.path == str((repo / "snapshots" / COMMITS[0]).resolve())
    # The cache moves on (a later download of main): the trials still read what was loaded.
    (repo / "refs" / "main").write_text(COMMITS[1])
    monkeypatch.chdir(tmp_path)
    assert torch.equal(_weight(recipe.build()), _weight(model))
    newer = LlamaForCausalLM.from_pretrained("acme/tiny")
    assert not torch.equal(_weight(newer), _weight(model))  # the test can tell them apart


def test_a_model_loaded_by_a_relative_path_is_rebuilt_from_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_llama(tmp_path / "work" / "ckpt")
    monkeypatch.chdir(tmp_path / "work")
    model = LlamaForCausalLM.from_pretrained("ckpt")
    recipe, why = recipe_of(model)
    assert recipe is not None, why
    assert Path(recipe.path).is_absolute()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a trial's working directory is its own
    assert torch.equal(_weight(recipe.build()), _weight(model))


def test_the_dtype_keyword_is_the_installed_transformers_one() -> None:
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    assert DTYPE_KEYWORD == ("dtype" if (major, minor) >= (4, 56) else "torch_dtype")


@pytest.mark.gpu
def test_a_model_quantized_on_loading_is_quantized_again_by_its_recipe(tmp_path: Path) -> None:
    """QLoRA's loading: bitsandbytes 4-bit from a checkpoint of plain weights."""
    pytest.importorskip("bitsandbytes")
    from transformers import BitsAndBytesConfig

    path = save_llama(tmp_path / "llama", hidden=256, layers=2)
    model = LlamaForCausalLM.from_pretrained(
        path, quantization_config=BitsAndBytesConfig(load_in_4bit=True), device_map={"": 0})
    recipe, why = recipe_of(model)
    assert recipe is not None and not recipe.pre_quantized, why
    rebuilt = recipe.build()
    kinds = {type(m).__name__ for m in rebuilt.modules()}
    assert "Linear4bit" in kinds, kinds
    assert os.environ.get("HF_HUB_OFFLINE") != "0"
    shutil.rmtree(tmp_path / "llama", ignore_errors=True)


# --- bad input said at tune, not in every trial (issue 70 item 7) ---------------------------

def test_a_config_edited_after_loading_sends_the_model_by_value_with_the_reason(
        tmp_path: Path) -> None:
    from autotune.adapters.hf.recipe import model_travel

    model = LlamaForCausalLM.from_pretrained(save_llama(tmp_path / "llama"))
    model.config.num_hidden_layers = 1  # the model keeps its two layers
    travel = model_travel(model)
    assert travel.part is model and "its config was edited since loading" in travel.words
    assert "model.layers.1." in travel.words


def test_weights_the_rebuilt_model_has_no_place_for_fail_the_build_naming_them(
        tmp_path: Path) -> None:
    from autotune.core.workload import WorkloadError

    recipe, why = recipe_of(LlamaForCausalLM.from_pretrained(save_llama(tmp_path / "llama")))
    assert recipe is not None, why
    recipe.extra = {"model.no_such_layer.weight": torch.zeros(2)}
    with pytest.raises(WorkloadError, match="model.no_such_layer.weight"):
        recipe.build()


def test_an_offloaded_model_is_refused_at_tune_with_what_to_do(tmp_path: Path) -> None:
    from autotune.core.workload import WorkloadError

    model = LlamaForCausalLM.from_pretrained(save_llama(tmp_path / "llama"))
    layer = model.model.layers[1].mlp.down_proj
    layer.weight = torch.nn.Parameter(torch.empty_like(layer.weight, device="meta"))
    with pytest.raises(WorkloadError, match="not in memory .*down_proj.*Load it without"):
        recipe_of(model)
