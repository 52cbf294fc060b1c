"""Fine-tuning a language model as teams run it: a small Llama saved with
``save_pretrained`` and loaded back by path, LoRA adapters from PEFT (through ``peft_config``, or
a PeftModel passed as the model), TRL's ``SFTTrainer`` with its own collator, packing,
padding-free batches, ``max_length`` and completion-only loss. Everything is built from configs
(nothing downloaded). What a user relies on: the model reaches the trials as its recipe, never
with its base weights; a model the recipe cannot rebuild travels by value, said; the trials'
model and step are the user's; the packing knob is TRL's own field; the export is an
SFTConfig's; and a study through ``hf.tune`` measures tokens/s, its result applies and trains,
and ``autotune verify`` runs the user's own ``SFTTrainer.train``."""

from __future__ import annotations

import copy
import functools
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("peft")

from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: E402
from trl import SFTConfig  # noqa: E402
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling  # noqa: E402

from autotune.adapters import hf  # noqa: E402
from autotune.adapters.hf.trl import SFTTrainerWorkload  # noqa: E402
from autotune.core import sequences  # noqa: E402
from autotune.core.env import probe  # noqa: E402
from autotune.core.knobs import KnobError  # noqa: E402
from autotune.core.shipping import Shipped  # noqa: E402
from autotune.core.space import build_space  # noqa: E402
from autotune.core.training import Training  # noqa: E402
from autotune.core.workload import resolve_target  # noqa: E402
from examples.hf_sft_lora import save_llama, users_sft_trainer  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small Llama saved as a downloaded checkpoint is: model.safetensors, config, tokenizer."""
    return save_llama(tmp_path_factory.mktemp("llama") / "llama", hidden=64, layers=2, vocab=512)


@functools.cache
def _env() -> Any:
    return probe("cpu")


def _ship(trainer: Any, folder: Path, **kwargs: Any) -> tuple[Any, Shipped]:
    """The trials' workload built from what ``hf.tune`` ships of ``trainer``, and the file."""
    spec = hf.trainer_parts(trainer, **kwargs).spec(folder)
    workload = resolve_target(spec["_target_"])(objects=spec["objects"], name=spec["name"])
    return workload, Shipped(spec["objects"])


def _base_rows(path: str) -> list[bytes]:
    """64 bytes from the middle of every matrix the checkpoint holds (random numbers: a copy of
    the weights would hold them)."""
    rows = []
    with safe_open(str(Path(path) / "model.safetensors"), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 - safe_open is no dict
            flat = f.get_tensor(key).reshape(-1)
            if f.get_slice(key).get_shape().__len__() >= 2:
                rows.append(flat[flat.numel() // 2:][:16].numpy().tobytes())
    return rows


def _shipped_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()))


def test_a_model_loaded_by_path_travels_as_its_recipe_and_no_base_weight_is_shipped(
        llama: str, tmp_path: Path, capsys: Any) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"))
    workload, shipped = _ship(trainer, tmp_path / "shipped")
    assert isinstance(workload, SFTTrainerWorkload)
    assert "model_recipe" in shipped and "model" not in shipped
    weights = (Path(llama) / "model.safetensors").stat().st_size
    model_bytes = len(shipped._blobs["model_recipe"]) + shipped.tensor_file.stat().st_size
    assert model_bytes < weights / 20, (model_bytes, weights)  # the adapters and the config
    everything = _shipped_bytes(tmp_path / "shipped")
    rows = _base_rows(llama)
    assert len(rows) >= 10 and not [r for r in rows if r in everything]
    said = capsys.readouterr().out
    assert "the model travels as its recipe, from_pretrained(" in said
    assert "LoRA adapter 'default', r=8" in said and "of base weights read by each trial" in said


def test_the_trials_model_is_the_users_adapters_frozen_base_and_trls_fused_head(
        llama: str, tmp_path: Path) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"))
    workload, _ = _ship(trainer, tmp_path / "shipped")
    theirs, ours = trainer.model, workload.model()
    assert type(ours) is type(theirs) and type(ours).__name__ == "PeftModelForCausalLM"
    mine, users = ours.state_dict(), theirs.state_dict()
    assert set(mine) == set(users) and all(torch.equal(mine[k], users[k]) for k in users)
    trainable = {n for n, p in theirs.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert {n for n, p in ours.named_parameters() if p.requires_grad} == trainable
    # The step is SFTTrainer's: TRL's fused LM head (log-probabilities, no logits).
    run = Training(workload, build_space(_env(), workload, {}).baseline, "cpu", seed=0)
    batch = next(iter(run.loader))
    out = run.model(**batch)
    assert type(out).__name__ == "FusedCausalLMOutput"
    loss = float(run.step(*run.to_device(*run.split(batch))))
    assert loss == pytest.approx(float(theirs(**batch, fused_lm_head=True).loss), rel=1e-4)


def test_a_peft_model_passed_as_the_model_travels_as_its_recipe(llama: str, tmp_path: Path) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"), peft_model=True)
    workload, shipped = _ship(trainer, tmp_path / "shipped")
    assert "model_recipe" in shipped
    ours, theirs = workload.model(), trainer.model
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in theirs.state_dict().items())
    # Its traits are the Llama's under PEFT's wrapper: attention and packing are knobs.
    assert "sdpa" in workload.attention_choices and workload.packs_sequences


@pytest.mark.parametrize("change", ["middle row", "merged adapters", "no path"])
def test_a_model_the_recipe_cannot_rebuild_is_shipped_by_value_with_its_size_said(
        change: str, llama: str, tmp_path: Path, capsys: Any) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"))
    base = trainer.model.get_base_model()
    if change == "middle row":  # trained by hand since loading, away from the first/last rows
        with torch.no_grad():
            base.model.embed_tokens.weight[base.config.vocab_size // 2, 0] += 1.0
    elif change == "merged adapters":
        with torch.no_grad():
            for name, p in trainer.model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.01)  # a merge that changes the base weights
        trainer.model.merge_adapter()
    else:
        config = copy.deepcopy(base.config)
        config._name_or_path = ""
        trainer.model = LlamaForCausalLM(config)  # built from its config: no path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workload, shipped = _ship(trainer, tmp_path / "shipped")
    why = {"middle row": "its weights changed since loading: model.embed_tokens.weight differs",
           "merged adapters": "its PEFT adapters are merged into its base weights",
           "no path": "it was not loaded with from_pretrained"}[change]
    said = capsys.readouterr().out
    assert f"the model travels by value ({why}" in said and "of weights shipped as safetensors" in said
    # A model with a path it no longer matches is a surprise worth a warning; one without is not.
    assert any(why in str(w.message) for w in caught) == (change != "no path")
    assert "model" in shipped and "model_recipe" not in shipped
    assert shipped.tensor_file.stat().st_size >= (Path(llama) / "model.safetensors").stat().st_size * 0.9
    theirs, ours = trainer.model, workload.model()
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in theirs.state_dict().items())


def test_a_head_the_checkpoint_lacks_travels_by_value_inside_the_recipe(llama: str,
                                                                       tmp_path: Path) -> None:
    """A model whose head was initialized on loading (a classifier on a causal LM's
    checkpoint): the recipe carries that head's weights, and the trial's equal the user's."""
    from transformers import LlamaForSequenceClassification

    from autotune.adapters.hf.recipe import model_travel

    model = LlamaForSequenceClassification.from_pretrained(llama, num_labels=3)
    travel = model_travel(model)
    assert travel.is_recipe and set(travel.part.extra) == {"score.weight"}
    rebuilt = travel.part.build()
    assert torch.equal(rebuilt.score.weight, model.score.weight)
    assert torch.equal(rebuilt.model.layers[1].mlp.up_proj.weight,
                       model.model.layers[1].mlp.up_proj.weight)


def test_bfd_packing_keeps_trls_padding_free_collator(llama: str, tmp_path: Path) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"), packing=True)
    workload, _ = _ship(trainer, tmp_path / "shipped")
    assert workload.defaults["padding_free"] is True
    values, why = workload.knob_limits["padding_free"]
    assert values == [True] and "BFD packing" in why
    with pytest.raises(KnobError, match="False not in \\[True\\] \\(TRL's BFD packing"):
        build_space(_env(), workload, {"padding_free": [False, True]})  # listed: refused, why
    space = build_space(_env(), workload, {})
    assert space.domains["padding_free"].values == [True]
    batch = next(iter(Training(workload, space.baseline, "cpu", seed=0).loader))
    assert "position_ids" in batch and "attention_mask" not in batch and batch["input_ids"].shape[0] == 1


def test_padding_free_is_trls_own_collator_field_and_max_length_holds_it(llama: str,
                                                                        tmp_path: Path) -> None:
    # max_length set, packing off: TRL refuses padding_free=True, so the knob stays off.
    held, _ = _ship(users_sft_trainer(llama, str(tmp_path / "a")), tmp_path / "a-shipped")
    values, why = held.knob_limits["padding_free"]
    assert values == [False] and "max_length" in why
    # max_length=None: searched when listed, through TRL's collator (not transformers').
    free, _ = _ship(users_sft_trainer(llama, str(tmp_path / "b"), max_length=None),
                    tmp_path / "b-shipped")
    assert "padding_free" not in free.knob_limits
    assert build_space(_env(), free, {"padding_free": [False, True]}).domains[
        "padding_free"].values == [False, True]
    packed = sequences.collator(free.collator, {"padding_free": True})
    inner = sequences.unwrapped(packed)
    assert isinstance(inner, DataCollatorForLanguageModeling) and inner.padding_free is True
    assert sequences.unwrapped(free.collator).padding_free is False  # the user's, untouched
    rows = [free.data[i] for i in range(4)]
    assert packed(rows)["input_ids"].shape[0] == 1
    # And back: a padding-free user's collator with the knob off pads again.
    own, _ = _ship(users_sft_trainer(llama, str(tmp_path / "c"), max_length=None,
                                     padding_free=True), tmp_path / "c-shipped")
    assert own.defaults["padding_free"] is True
    assert sequences.unwrapped(sequences.collator(own.collator, {"padding_free": False})).padding_free is False


def test_completion_only_loss_reaches_the_trials_in_the_prepared_labels(llama: str,
                                                                        tmp_path: Path) -> None:
    trainer = users_sft_trainer(llama, str(tmp_path / "out"), prompt_completion=True,
                                completion_only_loss=True)
    workload, _ = _ship(trainer, tmp_path / "shipped")
    first = workload.data[0]
    assert first["labels"][0] == -100 and first["labels"][-1] != -100  # the prompt ignored
    assert first["labels"] == trainer.train_dataset[0]["labels"]


def _knobs(workload: Any, **pins: Any) -> dict[str, Any]:
    return {**build_space(_env(), workload, {}).baseline, **pins}


def test_the_export_is_an_sftconfig_and_apply_keeps_the_users_checkpointing_kwargs(
        llama: str, tmp_path: Path) -> None:
    kwargs = {"use_reentrant": False, "preserve_rng_state": False}
    trainer = users_sft_trainer(llama, str(tmp_path / "out"), max_length=None,
                                gradient_checkpointing=True, gradient_checkpointing_kwargs=kwargs)
    workload, _ = _ship(trainer, tmp_path / "shipped")
    best = {"knobs": _knobs(workload, padding_free=True, activation_checkpointing=True),
            "device": {"type": "cpu"}}
    files = SFTTrainerWorkload.framework_exports(best)
    fields = files["training_args.yaml"]
    assert fields["padding_free"] is True
    assert "data_collator" not in files.get("model_settings.yaml", {})  # TRL's collator packs
    args = SFTConfig(output_dir=str(tmp_path / "new"), **fields)  # an SFTConfig's fields
    assert args.padding_free is True
    tuned = hf.tuned_arguments(trainer.args, best, trainer.data_collator)
    assert isinstance(tuned, SFTConfig) and tuned.padding_free is True
    field = "activation_checkpointing_kwargs" if hasattr(tuned, "activation_checkpointing_kwargs") \
        else "gradient_checkpointing_kwargs"
    assert getattr(tuned, field) == kwargs  # the user's own keys, use_reentrant as they gave it
    hf.apply(trainer, best)
    assert sequences.unwrapped(trainer.data_collator).padding_free is True
    trainer.args.max_steps = 1
    assert trainer.train().global_step == 1


def test_a_user_collator_in_an_sfttrainer_exports_as_a_trainer_does(llama: str,
                                                                   tmp_path: Path) -> None:
    from transformers import DataCollatorForSeq2Seq

    from autotune.adapters.hf.trl import SFTOwnCollatorWorkload

    trainer = users_sft_trainer(llama, str(tmp_path / "out"))
    trainer.data_collator = DataCollatorForSeq2Seq(trainer.processing_class)  # pads labels -100
    workload, _ = _ship(trainer, tmp_path / "shipped")
    assert isinstance(workload, SFTOwnCollatorWorkload)
    best = {"knobs": _knobs(workload, padding_free=True), "device": {"type": "cpu"}}
    files = SFTOwnCollatorWorkload.framework_exports(best)
    assert "padding_free" not in files["training_args.yaml"]
    assert "DataCollatorWithFlattening" in files["model_settings.yaml"]["data_collator"]
    assert hf.tuned_arguments(trainer.args, best, trainer.data_collator).padding_free is False


def test_verify_builds_the_users_sfttrainer_on_the_prepared_dataset(llama: str,
                                                                   tmp_path: Path) -> None:
    from autotune.adapters.hf.verify import build_trainer

    # Packed: a dataset SFTTrainer prepared again would be packed again, into other rows.
    trainer = users_sft_trainer(llama, str(tmp_path / "out"), eos_token="</s>", packing=True)
    workload, _ = _ship(trainer, tmp_path / "shipped")
    again = build_trainer(workload, str(tmp_path / "verify"), steps=2, device="cpu")
    assert type(again) is type(trainer) and isinstance(again.args, SFTConfig)
    assert again.args.eos_token == "</s>" and again.args.max_length == 64 and again.args.packing
    assert again.args.gradient_accumulation_steps == 4
    assert again.train_dataset["input_ids"] == trainer.train_dataset["input_ids"]  # not prepared again
    assert type(again.data_collator) is type(trainer.data_collator)
    assert again.data_collator.padding_free is True  # TRL's own, built from the SFTConfig
    mine, users = again.model.state_dict(), trainer.model.state_dict()
    assert all(torch.equal(mine[k], users[k]) for k in users)
    assert again.train().global_step == 2


def test_a_base_model_from_the_hub_cache_is_loaded_offline_by_its_id(llama: str) -> None:
    """A model id whose snapshot is not in the cache has no recipe here (nothing downloaded)."""
    from autotune.adapters.hf.recipe import model_travel

    model = AutoModelForCausalLM.from_pretrained(llama)
    model.name_or_path = "no-such-org/no-such-model"
    travel = model_travel(model)
    assert not travel.is_recipe and "not on this machine in safetensors form" in travel.words


def test_hf_tune_on_an_sfttrainer_measures_tokens_exports_an_sftconfig_and_verify_trains_it(
        llama: str, tmp_path: Path) -> None:
    """The study end to end on the CPU: tokens/s, an SFTConfig-compatible export, the study's
    files without a copy of the base weights, the result applied and trained, and verify
    running the user's own SFTTrainer.train on both sides."""
    import yaml

    import autotune
    from tests.conftest import TINY_ARGS

    trainer = users_sft_trainer(llama, str(tmp_path / "out"), n=128)
    try:
        tuned = hf.tune(trainer, [*TINY_ARGS, "study.numerics_steps=0"], device="cpu",
                        n_trials=2, name="sft", out_dir=tmp_path / "studies")
    except autotune.CouldNotMeasure as exc:  # a busy machine: its export still stands
        tuned = exc.tuned
    assert tuned.best.metrics["unit"] == "tokens/s" and tuned.best.metrics["tokens_per_sec"] > 0
    folder = tmp_path / "studies" / "sft"
    fields = yaml.safe_load((folder / "training_args.yaml").read_text())
    assert "padding_free" in fields
    assert SFTConfig(output_dir=str(tmp_path / "new"), **fields).max_length == 1024  # TRL's default
    assert isinstance(tuned.training_args, SFTConfig) and tuned.training_args.max_length == 64
    everything = _shipped_bytes(tmp_path / "studies" / ".shipped")
    assert not [r for r in _base_rows(llama) if r in everything]
    assert tuned.apply(trainer) is trainer
    trainer.args.max_steps = 1
    assert trainer.train().global_step == 1
    result = autotune.verify(folder, rounds=1, steps=2, warmup=1)
    # (A round that ran beside other work is measured again: one more figure per side.)
    assert result.realized.rounds >= 1 and result.realized.point > 0
    assert {f["grad_accum"] for f in result.figures["baseline"]} == {4}  # the user's own


def test_the_users_trainer_still_trains_after_tune_and_the_tuned_arguments_build_one(
        llama: str, tmp_path: Path) -> None:
    """hf.tune's TrainingArguments are made beside the user's Trainer, which the user may
    train as it is (its answer was "keep your settings"): a new TrainingArguments resets
    accelerate's process-wide state, and that Trainer's train() then failed."""
    from trl import SFTTrainer

    trainer = users_sft_trainer(llama, str(tmp_path / "out"), max_length=None)
    workload, _ = _ship(trainer, tmp_path / "shipped")
    best = {"knobs": _knobs(workload, batch_size=4), "device": {"type": "cpu"}}
    result = hf.HFTuned(best, trainer.args, trainer.data_collator)  # what hf.tune returns
    trainer.args.max_steps = 1
    assert trainer.train().global_step == 1
    tuned = result.training_args
    assert tuned.per_device_train_batch_size == 4 and tuned is result.training_args
    tuned.max_steps = 1
    other = SFTTrainer(model=trainer.model, args=tuned, train_dataset=trainer.train_dataset,
                       processing_class=trainer.processing_class)
    assert other.train().global_step == 1
