"""The Hugging Face adapter's optimizers (adapters/hf/optim.py): every ``optim`` the installed
TrainingArguments accepts is the baseline, built as the Trainer builds it; the search varies
only implementations of the same update (torch's AdamW plain or fused; bitsandbytes' forms
where listed, CUDA only), and an optim a trial cannot build fails that trial, naming it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from autotune.core.env import Env
from autotune.core.knobs import BY_NAME, KnobError
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import WorkloadError, build_workload
from tests.conftest import BARE_ARGS, run_cli

transformers = pytest.importorskip("transformers")

from autotune.adapters.hf import optim as hf_optim  # noqa: E402
from autotune.adapters.hf.workload import training_arguments_kwargs  # noqa: E402
from autotune.core import llm_domains  # noqa: E402

TINY_GPT2 = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 128, "n_positions": 32,
             "bos_token_id": 0, "eos_token_id": 0}
SPEC = {"_target_": "autotune.adapters.hf.HFWorkload", "model": "transformers.GPT2LMHeadModel",
        "config": "transformers.GPT2Config", "config_args": TINY_GPT2,
        "dataset": "examples.hf_tune.tokens",
        "dataset_args": {"n": 64, "seq_len": 16, "vocab_size": 128}}


def workload(**args: Any) -> Any:
    return build_workload({**SPEC, "training_args": {"per_device_train_batch_size": 4, **args}})


def export(knobs: dict[str, Any]) -> dict[str, Any]:
    return training_arguments_kwargs({"knobs": knobs, "device": {"type": "cpu"}})


@pytest.mark.parametrize("optim", hf_optim.accepted())
def test_every_optim_value_is_taken_as_the_baseline_and_kept(optim: str, cpu_env: Env) -> None:
    """No optim of the installed TrainingArguments is refused: it is trial 0's and the
    export's (torch's AdamW as adamw_torch with its implementation apart)."""
    wl = workload(optim=optim)
    space = build_space(cpu_env, wl, {})
    torch_adamw = optim in hf_optim.OPTIM_IMPL
    assert space.baseline["optimizer"] == ("adamw_torch" if torch_adamw else optim)
    assert export(space.baseline)["optim"] == optim
    # One value, whatever it is: nothing else is searched on the CPU, and the study says why.
    value, why = space.fixed["optimizer"]
    assert value == space.baseline["optimizer"] and why


@pytest.mark.parametrize("optim,cls,settings", [
    ("adafactor", "Adafactor", {"scale_parameter": False, "relative_step": False}),
    ("sgd", "SGD", {"momentum": 0.9, "nesterov": True}),
])
def test_adafactor_and_sgd_are_built_as_the_trainer_builds_them(
        optim: str, cls: str, settings: dict[str, Any], cpu_env: Env, tmp_path: Path) -> None:
    """The trial's optimizer is the Trainer's own create_optimizer's: the same class, the same
    arguments (optim_args included), the same weight-decay groups; kept, and said so."""
    args = {"optim": optim, "learning_rate": 3e-3, "weight_decay": 0.1,
            "optim_args": "momentum=0.9,nesterov=True" if optim == "sgd" else None}
    wl = workload(**args)
    space = build_space(cpu_env, wl, {})
    assert "kept as it is" in space.fixed["optimizer"][1]
    assert space.fixed["optimizer_impl"] == ("default", f"optim={optim} has the one "
                                             "implementation its name says")
    run = Training(wl, space.baseline, "cpu")
    opt = run.optimizer
    assert type(opt).__name__ == cls
    for key, value in settings.items():
        assert opt.defaults[key] == value
    assert opt.defaults["lr"] == 3e-3
    trainer = transformers.Trainer(model=run.model, args=transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], **args))
    theirs = trainer.create_optimizer()
    assert type(theirs) is type(opt)
    assert [({id(p) for p in g["params"]}, g["weight_decay"]) for g in opt.param_groups] == \
        [({id(p) for p in g["params"]}, g["weight_decay"]) for g in theirs.param_groups]
    # max_grad_norm's clipping: the step's, after unscaling (tests/test_clipping.py), no hook
    assert run.max_grad_norm == trainer.args.max_grad_norm and not opt._optimizer_step_pre_hooks
    loss = run.step(*run.to_device(next(iter(run.loader)), None))
    assert torch.isfinite(loss)
    assert export(space.baseline)["optim"] == optim


def test_adamw_torch_is_searched_against_adamw_torch_fused(cpu_env: Env) -> None:
    """torch's AdamW in both implementations (one update: a speed knob), each built as its
    optim name says, and exported as that name."""
    assert BY_NAME["optimizer_impl"].effect == "speed"
    wl = workload(optim="adamw_torch")
    space = build_space(cpu_env, wl, {})
    assert space.domains["optimizer_impl"].values == ["default", "fused"]
    for impl, optim in hf_optim.IMPL_OPTIM.items():
        knobs = {**space.baseline, "optimizer_impl": impl}
        opt = Training(wl, knobs, "cpu").optimizer
        assert type(opt) is torch.optim.AdamW and bool(opt.defaults["fused"]) == (impl == "fused")
        assert export(knobs)["optim"] == optim


def test_bitsandbytes_forms_are_opt_in_numerics_and_refused_on_the_cpu(cpu_env: Env) -> None:
    """8-bit and paged states change the numerics: never searched unless listed, and on the
    CPU (CUDA kernels) a listing is refused with the reason."""
    assert BY_NAME["optimizer"].effect == "numerics"
    wl = workload(optim="adamw_torch_fused")
    with pytest.raises(KnobError, match="CUDA kernels"):
        build_space(cpu_env, wl, {"optimizer": ["adamw_torch", "adamw_bnb_8bit"]})
    cuda = replace(cpu_env, device="cuda", cuda_capability=(9, 0), gpu_count=1)
    if not llm_domains.bitsandbytes_installed():
        dom = build_space(cuda, wl, {}).domains["optimizer"]
        assert dom.values == ["adamw_torch"] and "not installed" in (dom.reason or "")
    else:
        dom = build_space(cuda, wl, {}).domains["optimizer"]
        assert dom.values == ["adamw_torch"] and "list values" in (dom.reason or "")
        listed = build_space(cuda, wl, {"optimizer": ["adamw_torch", "paged_adamw_8bit"]})
        assert listed.domains["optimizer"].values == ["adamw_torch", "paged_adamw_8bit"]
    # A form of another update is never one of its values: Adafactor has none.
    with pytest.raises(KnobError, match="kept as it is"):
        build_space(cuda, workload(optim="adafactor"), {"optimizer": ["adafactor", "adamw_8bit"]})


def test_an_optim_a_trial_cannot_build_fails_that_trial_naming_it(cpu_env: Env) -> None:
    """Accepted as the baseline (the study starts); the trial that builds it fails with the
    optim named and why (bitsandbytes missing, or its CUDA kernels on the CPU)."""
    wl = workload(optim="paged_adamw_8bit")
    space = build_space(cpu_env, wl, {})
    assert "CUDA" in space.fixed["optimizer"][1]
    with pytest.raises(WorkloadError, match="optim=paged_adamw_8bit"):
        Training(wl, space.baseline, "cpu")
    # The search's value reaches the trial: a listed form is built, not the user's own.
    knobs = {**build_space(cpu_env, workload(optim="adamw_torch"), {}).baseline,
             "optimizer": "adamw_bnb_8bit"}
    if not llm_domains.bitsandbytes_installed():
        with pytest.raises(WorkloadError, match="optim=adamw_bnb_8bit"):
            Training(workload(optim="adamw_torch"), knobs, "cpu")
    with pytest.raises(WorkloadError, match="optim=lomo.*loss.backward"):
        Training(workload(optim="lomo"), build_space(cpu_env, workload(optim="lomo"), {}).baseline,
                 "cpu")


@pytest.mark.gpu
def test_bitsandbytes_8bit_adamw_is_built_with_32_bit_embeddings(cpu_env: Env) -> None:
    """On CUDA with bitsandbytes: the listed 8-bit AdamW runs a step, its embeddings' states
    in 32 bits as the Trainer registers them."""
    bnb = pytest.importorskip("bitsandbytes")
    wl = workload(optim="adamw_torch", bf16=True)
    cuda = replace(cpu_env, device="cuda")
    knobs = {**build_space(cuda, wl, {}).baseline, "optimizer": "adamw_bnb_8bit"}
    run = Training(wl, knobs, "cuda")
    assert "bitsandbytes" in type(run.optimizer).__module__
    loss = run.step(*run.to_device(next(iter(run.loader)), None))
    assert torch.isfinite(loss)
    manager = bnb.optim.GlobalOptimManager.get_instance()
    assert manager.module_weight_config_triple
    assert export(knobs)["optim"] == "adamw_bnb_8bit"


def test_a_study_keeps_adafactor_and_says_so(tmp_path: Path) -> None:
    """A real study on the CPU: the user's Adafactor is trial 0's and every trial's, the
    exported TrainingArguments keep it, and the study's header says it is kept."""
    config = "{" + ", ".join(f"{k}: {v}" for k, v in TINY_GPT2.items()) + "}"
    args = ["workload._target_=autotune.adapters.hf.HFWorkload",
            "+workload.model=transformers.GPT2LMHeadModel",
            "+workload.config=transformers.GPT2Config", f"+workload.config_args={config}",
            "+workload.dataset=examples.hf_tune.tokens",
            "+workload.dataset_args={n: 64, seq_len: 16, vocab_size: 128}",
            "+workload.training_args={per_device_train_batch_size: 4, optim: adafactor}",
            "study.name=o", "device=cpu", "study.n_trials=2", *BARE_ARGS]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "optim=adafactor is kept as it is" in proc.stdout + proc.stderr
    out = tmp_path / "studies" / "o"
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["knobs"]["optimizer"] == "adafactor" and best["study"]["failed"] == 0
    assert yaml.safe_load((out / "training_args.yaml").read_text())["optim"] == "adafactor"


@pytest.mark.parametrize("value,clips", [(None, 1.0), (0.5, 0.5), (0.0, None)])
def test_max_grad_norm_is_the_steps_clipping_as_the_trainers(value: float | None,
                                                             clips: float | None) -> None:
    """The Trainer clips to max_grad_norm (1.0 by default) where it is above 0, after
    accelerate unscales the gradients; the workload declares it for the step to clip so
    (core/training.py), and the optimizer carries no pre-step hook that would clip before a
    fused optimizer's own unscaling."""
    wl = workload(**({} if value is None else {"max_grad_norm": value}))
    assert wl.max_grad_norm == clips
    assert not hf_optim.build(wl.full_args, "adamw_torch_fused",
                              [torch.nn.Parameter(torch.zeros(2, 2))])._optimizer_step_pre_hooks
