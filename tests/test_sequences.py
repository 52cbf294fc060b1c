"""The knobs of transformer training (issue 31): attention implementation and SDPA backend,
activation checkpointing, length grouping, padding-free packing. Each is asserted on the real
model, Trainer or collator it reaches; a value the device or model cannot use is out of the
domain with its reason; the numerics hold on a real model."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    DataCollatorWithFlattening,
    TrainingArguments,
)
from transformers.trainer_pt_utils import LengthGroupedSampler  # noqa: E402

from autotune.adapters import hf  # noqa: E402
from autotune.adapters.hf.workload import (  # noqa: E402
    _CHECKPOINTING_FIELDS,
    training_arguments_kwargs,
    version_field,
)
from autotune.core.env import probe  # noqa: E402
from autotune.core.knobs import KnobError  # noqa: E402
from autotune.core.sequences import unwrapped  # noqa: E402
from autotune.core.space import build_space  # noqa: E402
from autotune.core.training import Training  # noqa: E402
from autotune.workloads.gpt import GPTWorkload  # noqa: E402
from autotune.workloads.mlp import MLPWorkload  # noqa: E402
from examples.hf_lm import users_trainer  # noqa: E402
from tests.conftest import scratch  # noqa: E402


def _workload(**model_kw: Any) -> Any:
    trainer = users_trainer(str(scratch()), n=32, max_len=48, **{"layers": 1, "hidden": 32, **model_kw})
    from autotune.adapters.hf.workload import HFTrainerWorkload
    from autotune.core.shipping import ship

    parts = hf.trainer_parts(trainer)
    folder = ship(parts.parts, scratch(), parts.names)
    return HFTrainerWorkload(str(folder)), trainer


@functools.cache
def _env() -> Any:
    """This machine, probed once (a probe takes seconds)."""
    return probe("cpu")


def _knobs(wl: Any, **pins: Any) -> dict[str, Any]:
    space = build_space(_env(), wl, {})
    return {**space.baseline, **pins}


def test_domains_on_this_cpu_name_what_is_out_and_why() -> None:
    env = _env()
    wl, _ = _workload()
    space = build_space(env, wl, {})
    assert space.domains["attention"].values == ["eager", "sdpa", "sdpa_math", "sdpa_flash"]
    assert "CUDA kernels only" in space.domains["attention"].reason
    assert space.baseline["attention"] == "sdpa"  # the model's own implementation
    assert space.domains["activation_checkpointing"].values == [False, True]
    # Opt-in: which samples share a batch is the user's call.
    for knob in ("length_grouping", "padding_free"):
        assert space.domains[knob].values == [False]
        assert f"knobs.{knob}=[false,true]" in space.domains[knob].reason
    listed = build_space(env, wl, {"length_grouping": [False, True], "padding_free": [False, True]})
    assert listed.domains["padding_free"].values == [False, True]

    dropout, _ = _workload(attention_dropout=0.1)
    dom = build_space(env, dropout, {}).domains["attention"]
    assert "sdpa_flash" not in dom.values and "refuses the model's attention dropout" in dom.reason

    gpt = build_space(env, GPTWorkload().cpu_sized(), {})
    assert gpt.domains["attention"].values == ["sdpa", "sdpa_math", "sdpa_flash"]
    assert gpt.domains["activation_checkpointing"].values == [False, True]
    mlp = build_space(env, MLPWorkload(), {})
    assert mlp.domains["attention"].values == ["default"]
    assert mlp.domains["padding_free"].values == [False]
    with pytest.raises(KnobError, match="padding_free"):
        build_space(env, MLPWorkload(), {"padding_free": [False, True]})


def _checkpointing(model: Any) -> bool:
    """Whether the model recomputes its activations, under the installed transformers' name
    (5.23 says is_activation_checkpointing; 5.17, a GPU machine's, is_gradient_checkpointing)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(model.is_gradient_checkpointing)


def test_each_knob_reaches_the_real_model_and_loader() -> None:
    wl, _ = _workload()
    run = Training(wl, _knobs(wl, attention="eager", activation_checkpointing=True,
                              length_grouping=True, padding_free=True), "cpu")
    model = run.model
    assert model.config._attn_implementation == "eager"
    assert _checkpointing(model)
    assert model.config.use_cache is False  # packed batches are only kept apart without a cache
    assert isinstance(unwrapped(run.loader.collate_fn), DataCollatorWithFlattening)
    assert isinstance(run.loader.sampler, LengthGroupedSampler)
    batch = next(iter(run.loader))
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch
    loss = run.step(*run.to_device(*run.split(batch)))
    assert torch.isfinite(loss)

    plain = Training(wl, _knobs(wl), "cpu")
    assert plain.model.config._attn_implementation == "sdpa"
    assert not _checkpointing(plain.model)
    assert not isinstance(unwrapped(plain.loader.collate_fn), DataCollatorWithFlattening)


def test_the_sdpa_backend_is_set_around_the_forward() -> None:
    """CPU flash attention refuses dropout: pinned to flash, the step fails; pinned to math,
    the same step runs. So the backend really is the one the knob names."""
    wl, _ = _workload(attention_dropout=0.1)
    flash = Training(wl, _knobs(wl, attention="sdpa_flash"), "cpu")
    batch = flash.to_device(*flash.split(next(iter(flash.loader))))
    with pytest.raises(RuntimeError, match="No available kernel"):
        flash.step(*batch)
    math_run = Training(wl, _knobs(wl, attention="sdpa_math"), "cpu")
    assert torch.isfinite(math_run.step(*batch))


def _first_losses(wl: Any, steps: int = 2, **pins: Any) -> list[float]:
    run = Training(wl, _knobs(wl, **pins), "cpu", seed=0)
    it = iter(run.loader)
    return [float(run.step(*run.to_device(*run.split(next(it))))) for _ in range(steps)]


def test_backends_checkpointing_and_packing_train_the_same_losses() -> None:
    """The numerics check's comparison on a real model: the same samples, the same seed; each
    knob's losses within 1e-4 of the model's own (their tolerance is 5%)."""
    wl, _ = _workload()
    reference = _first_losses(wl)
    for pins in ({"attention": "eager"}, {"attention": "sdpa_math"},
                 {"attention": "sdpa_flash"}, {"activation_checkpointing": True},
                 {"padding_free": True},
                 # a checkpointed layer's recompute in backward under the pinned backend too
                 {"attention": "sdpa_math", "activation_checkpointing": True},
                 {"attention": "sdpa_flash", "activation_checkpointing": True}):
        losses = _first_losses(wl, **pins)
        assert losses == pytest.approx(reference, rel=1e-4), pins


def test_the_hf_export_sets_the_trainer_fields_and_apply_sets_the_rest() -> None:
    wl, trainer = _workload()
    knobs = _knobs(wl, attention="sdpa_math", activation_checkpointing=True,
                   length_grouping=True, padding_free=True)
    best = {"knobs": knobs, "device": {"type": "cpu"}}
    kwargs = training_arguments_kwargs(best)
    args = TrainingArguments(output_dir=str(scratch()), report_to="none", **kwargs)
    field = version_field(_CHECKPOINTING_FIELDS)  # transformers 5.23's name or 5.17's
    assert getattr(args, field) is True
    assert getattr(args, f"{field}_kwargs") == {"use_reentrant": False}
    assert str(getattr(args.train_sampling_strategy, "value", args.train_sampling_strategy)) \
        == "group_by_length"
    hf.apply(trainer, best)
    assert getattr(trainer.args, field) is True
    assert trainer.model.config._attn_implementation == "sdpa"
    assert trainer.model.config.use_cache is False
    assert isinstance(unwrapped(trainer.data_collator), DataCollatorWithFlattening)
    assert isinstance(trainer._get_train_sampler(), LengthGroupedSampler)
    # What no field holds is listed for the user (best.yaml's hf section says apply sets it).
    assert {"attention", "padding_free"} <= set(hf.unapplied(best))


def test_a_pinned_backend_with_checkpointing_trains_through_the_trainer_and_the_plain_loop() -> None:
    """A pinned SDPA backend held around the forward only left a checkpointed layer's
    recompute in backward to another backend, and torch.utils.checkpoint raised
    CheckpointError on every step: in ``hf.apply``'s Trainer and in autotune's own loop (the
    gpt workload's trials with sdpa_math and checkpointing all crashed, 2026-11-27)."""
    wl, trainer = _workload()
    knobs = _knobs(wl, attention="sdpa_math", activation_checkpointing=True)
    hf.apply(trainer, {"knobs": knobs, "device": {"type": "cpu"}})
    trainer.args.max_steps = 2
    assert torch.isfinite(torch.tensor(trainer.train().training_loss))
    gpt = GPTWorkload(vocab=64, seq_len=16, d_model=32, n_layer=1, n_head=2, n_sequences=16,
                      batch_size=4)
    run = Training(gpt, _knobs(gpt, attention="sdpa_math", activation_checkpointing=True,
                               batch_size=4), "cpu", seed=0)
    assert torch.isfinite(run.step(*run.to_device(*run.split(next(iter(run.loader))))))


def test_the_diagnosis_names_the_padding_share_and_offers_grouping_where_allowed() -> None:
    from autotune.diagnose.verdicts import diagnose

    wl, _ = _workload()
    env = _env()
    knobs = _knobs(wl)
    result = {"samples_per_sec": 100.0, "padding_share": 0.31,
              "timers": {"data_wait": 0.0, "h2d": 0.0, "step": 1.0}}
    allowed = build_space(env, wl, {"length_grouping": [False, True],
                                    "padding_free": [False, True]})
    verdict = diagnose(result, knobs, "cpu", 16.0, domains=allowed.domains)
    assert verdict["summary"].startswith("31% of the tokens computed are padding.")
    assert [f["knob"] for f in verdict["fixes"]][:2] == ["padding_free", "length_grouping"]
    # Not listed by the user: not on offer, and the summary says how to allow them.
    closed = diagnose(result, knobs, "cpu", 16.0, domains=build_space(env, wl, {}).domains)
    assert not {"padding_free", "length_grouping"} & {f["knob"] for f in closed["fixes"]}
    assert "knobs.length_grouping=[false,true]" in closed["summary"]
    quiet = diagnose({**result, "padding_share": 0.05}, knobs, "cpu", 16.0,
                     domains=allowed.domains)
    assert "padding" not in quiet["summary"]


def test_a_language_model_study_runs_in_tokens_and_verify_measures_its_trainer(
        tmp_path: Path) -> None:
    """A real Trainer over variable-length texts, the opt-in knobs listed: every trial is
    measured in real tokens/s with its padding share; packing and grouping are searched; the
    baseline (the LM collator's padding) is diagnosed with its padding; verify compares the
    Trainer's own real tokens/s."""
    import csv

    import yaml

    import autotune
    from tests.conftest import TINY_ARGS

    # No confirmation rounds: tokens/s in the rounds is the fine-tuning tutorial's
    # (tests/test_docs_examples.py, finetune_sft.py).
    trainer = users_trainer(str(tmp_path / "out"), n=64, max_len=48, layers=1, hidden=32)
    knobs = {"length_grouping": [False, True], "padding_free": [False, True],
             "num_workers": 0, "cpu_threads": 1}
    hf.tune(trainer, [*TINY_ARGS, "study.numerics_steps=2", "study.confirm_runs=0"],
            device="cpu", n_trials=3,
            name="lm", out_dir=tmp_path / "studies", knobs=knobs)
    folder = tmp_path / "studies" / "lm"
    with open(folder / "trials.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["state"] == "COMPLETE"]
    assert rows and all(r["unit"] == "tokens/s" and float(r["tokens_per_sec"]) > 0 for r in rows)
    baseline = rows[0]
    assert float(baseline["padding_share"]) > 0.1  # the collator pads every batch to its longest
    assert "of the tokens computed are padding" in baseline["diagnosis"]
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["metrics"]["unit"] == "tokens/s"
    result = autotune.verify(folder, rounds=1, steps=3, warmup=1)
    assert result.how == "Trainer.train"
    assert all(f["tokens_per_sec"] > 0 for side in result.figures.values() for f in side)


def test_the_hf_export_names_the_model_settings_no_training_argument_holds(tmp_path: Path) -> None:
    from autotune.adapters.hf.workload import HFWorkload

    wl, _ = _workload()
    best = {"knobs": _knobs(wl, attention="sdpa_math", padding_free=True), "device": {"type": "cpu"}}
    files = HFWorkload.framework_exports(best)
    assert files["model_settings.yaml"] == {
        "attn_implementation": "sdpa", "sdpa_backend": "MATH", "use_cache": False,
        "data_collator": "transformers.DataCollatorWithFlattening(return_position_ids=True, "
                         "separator_id=-100)"}
    from transformers import LlamaConfig, LlamaForCausalLM

    built = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
        attn_implementation=files["model_settings.yaml"]["attn_implementation"]))
    assert built.config._attn_implementation == "sdpa"


def _cuda_env() -> Any:
    """A CUDA machine as the registry sees it (the domains read the Env, not the device)."""
    from dataclasses import replace

    return replace(_env(), device="cuda", device_name="NVIDIA H200", cuda_capability=(9, 0),
                   bf16=True, gpu_count=1, total_memory_gb=139.0)


def test_on_cuda_flash_and_cudnn_attention_are_never_proposed_without_amp() -> None:
    """CUDA's flash and cuDNN attention kernels run in fp16/bf16 only: pinned to one of them
    an fp32 step fails ("No available kernel"). The value rule keeps them out of every trial
    without amp, so the sampler, the agent's proposals and the baseline never spend a trial
    on them; with amp they stay in the search."""
    import optuna

    from autotune.core.domains import HALF_PRECISION_ATTENTION

    env = _cuda_env()
    gpt = GPTWorkload().cpu_sized()
    space = build_space(env, gpt, {})
    assert {"sdpa_flash", "sdpa_efficient"} <= set(space.domains["attention"].values)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        knobs = space.suggest(trial)
        seen.add((knobs["amp"], knobs["attention"]))
        if knobs["amp"] == "off":
            assert knobs["attention"] not in HALF_PRECISION_ATTENTION, knobs
        study.tell(trial, 1.0)
        # What was stored reads back the same (a resumed study, the agent, the exports).
        assert space.complete(study.trials[-1].params)["attention"] == knobs["attention"]
    assert ("bf16", "sdpa_flash") in seen and ("off", "sdpa_efficient") in seen
    # The agent's proposal of a refused pair keeps amp and drops the kernel it cannot run.
    proposal = space.complete(space.searched({**space.baseline, "amp": "off",
                                              "attention": "sdpa_flash"}))
    assert proposal["amp"] == "off" and proposal["attention"] not in HALF_PRECISION_ATTENTION
    # A user's own pin that can only fail is said before the study starts.
    with pytest.raises(KnobError, match="fp16/bf16 only on CUDA"):
        build_space(env, gpt, {"attention": "sdpa_flash", "amp": "off"})
    # Pinned to flash, amp is searched over what flash runs with, from the baseline on.
    pinned = build_space(env, gpt, {"attention": "sdpa_flash"})
    assert pinned.domains["amp"].values == ["fp16", "bf16"]
    assert "runs only with amp in" in pinned.domains["amp"].reason
    assert pinned.baseline["amp"] in ("fp16", "bf16")
    # On the CPU the rule is off: CPU flash attention runs in fp32.
    assert build_space(_env(), gpt, {}).domains["attention"].refuses is None


@pytest.mark.gpu
def test_on_cuda_every_backend_trains_under_amp_checkpointing_and_graphs_and_fp32_flash_fails() -> None:
    """Each SDPA backend this GPU has, under bf16 autocast, with activation checkpointing and
    the whole step captured in a CUDA Graph (the recompute runs inside the capture, under the
    same pinned backend), trains with finite losses. And the value rule's premise, on the
    real device: flash pinned without amp fails, so the rule keeps it out (if this GPU's
    torch ever runs it, this test says the rule has become too strict)."""
    from autotune.core.env import probe
    from autotune.core.sequences import sdpa_backends

    env = probe("cuda")
    gpt = GPTWorkload(vocab=512, seq_len=128, d_model=128, n_layer=2, n_head=4,
                      n_sequences=256, batch_size=8)
    base = build_space(env, gpt, {}).baseline
    for backend in sdpa_backends("cuda"):
        for ckpt in (False, True):
            knobs = {**base, "attention": backend, "amp": "bf16", "cuda_graphs": True,
                     "activation_checkpointing": ckpt}
            run = Training(gpt, knobs, "cuda")
            batches = iter(run.loader)
            for _ in range(4):  # warm-up, capture, replays
                loss = run.step(*run.to_device(*next(batches)))
            assert torch.isfinite(loss).item(), (backend, ckpt)
    fp32 = Training(gpt, {**base, "attention": "sdpa_flash", "amp": "off"}, "cuda")
    with pytest.raises(RuntimeError, match="No available kernel"):
        fp32.step(*fp32.to_device(*next(iter(fp32.loader))))
