"""The Lightning and Hugging Face adapters: a user's LightningModule + DataModule, or a
transformers model built from a config, runs a real study through the adapter, and the exported
arguments construct the framework's real Trainer / TrainingArguments and train a few steps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import autotune
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.training import Training
from autotune.core.workload import WorkloadError, build_workload
from tests.conftest import BARE_ARGS, ROOT, TINY_ARGS, run_cli

L = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")

LIGHTNING = "autotune.adapters.lightning.LightningWorkload"
HF = "autotune.adapters.hf.HFWorkload"
TINY_GPT2 = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 128, "n_positions": 32,
             "bos_token_id": 0, "eos_token_id": 0}
HF_SPEC = {"_target_": HF, "model": "transformers.GPT2LMHeadModel",
           "config": "transformers.GPT2Config", "config_args": TINY_GPT2,
           "dataset": "examples.hf_tune.tokens",
           "dataset_args": {"n": 128, "seq_len": 32, "vocab_size": 128},
           "training_args": {"per_device_train_batch_size": 4}}
STUDY = ["device=cpu", "study.n_trials=3", "study.confirm_runs=0", *TINY_ARGS]


class ManualModule(L.LightningModule):
    """Manual optimization: its training_step steps the optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(32, 10)


class TwoOptimizers(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.a.parameters(), lr=0.1),
                torch.optim.SGD(self.b.parameters(), lr=0.1)]


class DictModule(L.LightningModule):
    """A module whose batches are dicts ({"x", "y"}), as many DataModules yield."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": torch.nn.functional.cross_entropy(self.net(batch["x"]), batch["y"])}

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]


class OwnLoader(L.LightningModule):
    """A module with its own train_dataloader() (no DataModule)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return torch.nn.functional.cross_entropy(self.net(batch["x"]), batch["y"])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> Any:
        return dict_loader()


def dict_loader(n: int = 64, batch_size: int = 8) -> Any:
    data = [{"x": torch.randn(8), "y": torch.tensor(i % 3)} for i in range(n)]
    return torch.utils.data.DataLoader(data, batch_size=batch_size, num_workers=0)


def _lightning_spec(**extra: Any) -> dict[str, Any]:
    return {"_target_": LIGHTNING, "module": "examples.lightning_tune.Classifier",
            "module_args": {"hidden": 16},
            "datamodule": "examples.lightning_tune.RandomData",
            "datamodule_args": {"n": 256, "batch_size": 16, "num_workers": 0}, **extra}


# --- Lightning ---------------------------------------------------------------------------------
def test_lightning_baseline_is_the_datamodules_loader_and_precision(cpu_env: Env) -> None:
    wl = build_workload(_lightning_spec(precision="bf16-mixed"))
    assert wl.defaults["batch_size"] == 16 and wl.defaults["num_workers"] == 0
    assert wl.defaults["amp"] == "bf16"
    space = build_space(cpu_env, wl, {})
    assert space.baseline["batch_size"] == 16
    assert space.domains["set_to_none"].values == [True]  # Lightning's zero_grad sets None
    assert "Lightning" in (space.domains["set_to_none"].reason or "")


def test_lightning_step_is_training_step_with_configure_optimizers(cpu_env: Env) -> None:
    """The measured step calls the module's training_step (its loss), with the optimizer
    configure_optimizers returned (dict form, scheduler beside it) rebuilt with foreach=."""
    wl = build_workload(_lightning_spec())
    knobs = {**build_space(cpu_env, wl, {}).baseline, "optimizer_impl": "foreach"}
    run = Training(wl, knobs, "cpu")
    opt = run.optimizer
    assert type(opt) is torch.optim.AdamW and opt.defaults["foreach"] is True
    assert opt.param_groups[0]["lr"] == 1e-3
    before = [p.detach().clone() for p in run.model.parameters()]
    x, y = next(iter(run.loader))
    # the whole batch goes to training_step; its loss is the module's cross-entropy
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(wl.step_module.module(x), y)
    loss = run.step(*run.to_device((x, y), None))
    assert torch.allclose(loss, expected) and wl.step_module.batch_idx == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, run.model.parameters(), strict=True))


def test_lightning_trials_start_from_the_same_weights(cpu_env: Env) -> None:
    """Every Training gets a fresh module built after the seed (also when the loader came from
    the module's own train_dataloader), so trials and numerics re-runs start alike."""
    wl = build_workload({"_target_": LIGHTNING, "module": "tests.test_adapters.OwnLoader"})
    knobs = build_space(cpu_env, wl, {}).baseline
    first = [p.detach().clone() for p in Training(wl, knobs, "cpu").model.parameters()]
    torch.randn(100)  # RNG consumed in between
    second = list(Training(wl, knobs, "cpu").model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_lightning_dict_batches_reach_training_step_as_a_dict(cpu_env: Env) -> None:
    """A dict batch (model(**inputs) under autotune's convention) is handed back to
    training_step whole; a dict return's "loss" is the loss; ([opts], [scheds]) is accepted."""
    wl = build_workload({"_target_": LIGHTNING, "module": "tests.test_adapters.DictModule",
                         "dataloader": "tests.test_adapters.dict_loader"})
    assert wl.defaults["batch_size"] == 8
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    batch = next(iter(run.loader))
    losses = [run.step(*run.to_device(*run.split(batch))) for _ in range(3)]
    assert all(torch.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert wl.step_module.batch_idx == 3


@pytest.mark.parametrize("module,needle", [
    ("tests.test_adapters.ManualModule", "manual optimization"),
    ("tests.test_adapters.TwoOptimizers", "2 optimizers"),
])
def test_lightning_unsupported_modules_are_explained(cpu_env: Env, module: str, needle: str) -> None:
    wl = build_workload(_lightning_spec(module=module, module_args=None))
    with pytest.raises(WorkloadError, match=needle):
        Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")


def test_lightning_bad_precision_names_valid_values() -> None:
    with pytest.raises(WorkloadError, match="bf16-mixed"):
        build_workload(_lightning_spec(precision="bf16-true"))


def test_lightning_study_exports_a_trainer_that_fits(tmp_path: Path) -> None:
    args = [f"workload._target_={LIGHTNING}", "+workload.module=examples.lightning_tune.Classifier",
            "+workload.module_args={hidden: 16}",
            "+workload.datamodule=examples.lightning_tune.RandomData",
            "+workload.datamodule_args={n: 512, batch_size: 16}", "study.name=lit", *STUDY]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "lit"
    best = autotune.load_best(out / "best.yaml")
    counts = best.document["study"]
    # Every trial ran through the adapter (pruning, load-dependent, may stop some early).
    assert counts["trials"] == 3 and counts["failed"] == 0, proc.stdout[-3000:]
    exported = yaml.safe_load((out / "lightning.yaml").read_text())
    from autotune.adapters.lightning import dataloader_kwargs, trainer_kwargs

    assert exported["trainer"] == trainer_kwargs(best)
    assert exported["dataloader"]["batch_size"] == best.knobs["batch_size"]
    from examples.lightning_tune import train

    trainer = train(out / "best.yaml", max_steps=3, hidden=16)
    assert trainer.global_step == 3
    assert trainer.precision == trainer_kwargs(best)["precision"]
    assert trainer.train_dataloader.batch_size == dataloader_kwargs(best)["batch_size"]


# --- Hugging Face ------------------------------------------------------------------------------
def test_hf_baseline_is_the_users_training_arguments(cpu_env: Env) -> None:
    wl = build_workload({**HF_SPEC, "training_args": {
        "per_device_train_batch_size": 4, "optim": "adamw_torch", "dataloader_num_workers": 1,
        "dataloader_prefetch_factor": 4}})
    assert wl.defaults["batch_size"] == 4 and wl.defaults["optimizer_impl"] == "default"
    assert wl.defaults["num_workers"] == 1 and wl.defaults["prefetch_factor"] == 4
    space = build_space(cpu_env, wl, {})
    assert space.domains["optimizer_impl"].values == ["default", "fused"]
    assert build_workload(HF_SPEC).defaults["optimizer_impl"] == "fused"  # transformers' default


def test_hf_step_calls_the_model_with_the_dict_and_clips(cpu_env: Env) -> None:
    wl = build_workload(HF_SPEC)
    run = Training(wl, build_space(cpu_env, wl, {}).baseline, "cpu")
    batch = next(iter(run.loader))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    loss = run.step(*run.to_device(batch, None))
    assert torch.isfinite(loss) and 3 < loss.item() < 8  # ~ln(128) for random tokens
    # max_grad_norm=1.0 (the Trainer's default), clipped by the step after unscaling
    assert run.max_grad_norm == 1.0 and not run.optimizer._optimizer_step_pre_hooks


@pytest.mark.parametrize("bad,needle", [
    ({"per_device_batch": 4}, "per_device_batch"),
    ({"optim": "adam_w"}, "adam_w"),  # no optimizer of TrainingArguments (adafactor is one)
])
def test_hf_bad_training_args_are_explained(bad: dict[str, Any], needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle) as info:
        build_workload({**HF_SPEC, "training_args": bad})
    assert "TrainingArguments" in str(info.value)


@pytest.mark.parametrize("knobs", [
    {"batch_size": 8, "num_workers": 0, "amp": "off", "compile": "off", "optimizer_impl": "fused"},
    {"batch_size": 4, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True,
     "amp": "bf16", "compile": "max-autotune", "optimizer_impl": "default"},
])
def test_training_arguments_kwargs_are_real_fields(knobs: dict[str, Any], tmp_path: Path) -> None:
    from autotune.adapters.hf import training_arguments_kwargs

    full = {"pin_memory": False, "prefetch_factor": None, "persistent_workers": False,
            "tf32": False, "non_blocking": False, **knobs}
    kwargs = training_arguments_kwargs({"knobs": full, "device": {"type": "cpu"}})
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **kwargs)
    assert args.per_device_train_batch_size == knobs["batch_size"]
    assert args.bf16 == (knobs["amp"] == "bf16") and args.dataloader_num_workers == knobs["num_workers"]
    assert args.torch_compile == (knobs["compile"] != "off")
    assert args.optim == {"fused": "adamw_torch_fused", "default": "adamw_torch"}[knobs["optimizer_impl"]]


def test_hf_study_exports_training_arguments_that_train(tmp_path: Path) -> None:
    config = ("{n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 128, n_positions: 32, "
              "bos_token_id: 0, eos_token_id: 0}")
    args = [f"workload._target_={HF}", "+workload.model=transformers.GPT2LMHeadModel",
            "+workload.config=transformers.GPT2Config", f"+workload.config_args={config}",
            "+workload.dataset=examples.hf_tune.tokens",
            "+workload.dataset_args={n: 256, seq_len: 32, vocab_size: 128}",
            "+workload.training_args={per_device_train_batch_size: 4}", "study.name=hf",
            "study.keep_global_batch=true", *STUDY]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "hf"
    best = autotune.load_best(out / "best.yaml")
    counts = best.document["study"]
    assert counts["trials"] == 3 and counts["failed"] == 0, proc.stdout[-3000:]
    fields = yaml.safe_load((out / "training_args.yaml").read_text())
    assert fields["per_device_train_batch_size"] == best.knobs["batch_size"]
    # keep_global_batch: the Trainer trains with the baseline's global batch of 4
    assert best.document["global_batch"] == 4
    assert fields["per_device_train_batch_size"] * fields["gradient_accumulation_steps"] == 4
    assert fields["gradient_accumulation_steps"] == best.document.get("grad_accum", 1)
    from examples.hf_tune import train

    result = train(out / "best.yaml", max_steps=3, config=dict(TINY_GPT2),
                   output_dir=str(tmp_path / "hf-out"))
    assert result.global_step == 3 and result.training_loss > 0


@pytest.mark.gpu
def test_lightning_study_on_cuda_exports_a_trainer_that_fits(tmp_path: Path) -> None:
    """On CUDA: the Lightning-only limits hold (no CUDA Graphs, non_blocking copies) and the
    exported precision/benchmark/loader arguments fit on the GPU."""
    args = [f"workload._target_={LIGHTNING}", "+workload.module=examples.lightning_tune.Classifier",
            "+workload.datamodule=examples.lightning_tune.RandomData", "study.name=lit-cuda",
            "device=cuda", "study.n_trials=2", "study.remeasure_contended=0", *BARE_ARGS]
    # Its subject is the export, not the measurement: no confirmation or numerics windows,
    # each window once (each a Lightning process with its own CUDA start; beside the GPU
    # check's other test processes every window is contended, and measured again by default).
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "lit-cuda"
    best = autotune.load_best(out / "best.yaml")
    assert best.knobs["cuda_graphs"] is False and best.knobs["non_blocking"] is True
    from examples.lightning_tune import train

    assert train(out / "best.yaml", max_steps=3).global_step == 3


# --- import-light --------------------------------------------------------------------------------
def test_autotune_imports_without_the_frameworks() -> None:
    """Without lightning / transformers installed, autotune imports and the adapter says
    which extra to install."""
    code = ("import sys; sys.modules['lightning'] = None; sys.modules['transformers'] = None\n"
            "import autotune, autotune.adapters, autotune.cli.main\n"
            "from autotune.core.workload import build_workload, WorkloadError\n"
            "for spec in ({'_target_': 'autotune.adapters.lightning.LightningWorkload',"
            " 'module': 'x'}, {'_target_': 'autotune.adapters.hf.HFWorkload', 'model': 'x',"
            " 'dataset': 'x'}):\n"
            "    try: build_workload(spec)\n"
            "    except WorkloadError as e: print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "pip install -e '.[lightning]'" in proc.stdout and "pip install -e '.[hf]'" in proc.stdout


def test_exports_carry_the_kept_global_batch(tmp_path: Path) -> None:
    """study.keep_global_batch: best.yaml's grad_accum becomes the Trainer's
    accumulate_grad_batches and TrainingArguments' gradient_accumulation_steps, and both
    frameworks accept them."""
    from autotune.adapters.hf import training_arguments_kwargs
    from autotune.adapters.lightning import lightning_document, trainer_kwargs

    knobs = {"batch_size": 8, "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
             "persistent_workers": False, "amp": "off", "compile": "off", "tf32": False,
             "cudnn_benchmark": False, "optimizer_impl": "default", "non_blocking": False,
             "channels_last": False, "host_allocator": "retain"}
    doc = {"knobs": knobs, "grad_accum": 4, "device": {"type": "cpu"}}
    assert trainer_kwargs(doc)["accumulate_grad_batches"] == 4
    trainer = L.Trainer(**trainer_kwargs(doc), accelerator="cpu", logger=False)
    assert trainer.accumulate_grad_batches == 4
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **training_arguments_kwargs(doc))
    assert args.gradient_accumulation_steps == 4 and args.per_device_train_batch_size == 8
    assert lightning_document(doc)["environment"]["MALLOC_MMAP_MAX_"] == "0"
    assert trainer_kwargs({**doc, "grad_accum": None})["accumulate_grad_batches"] == 1
