"""The Hugging Face and Lightning adapters under launch.nproc_per_node (issue 29): their trials
run as DDP ranks with the frameworks' own DDP rules, and the exports are the frameworks' real
objects: TrainingArguments' ddp_* fields and the Accelerator's DDP arguments, Lightning's
DDPStrategy. A launched study runs every trial of an adapter workload as 2 gloo ranks."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from autotune.core.distributed import ddp_kwargs, has_ddp_argument
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.core.workload import build_workload
from tests.conftest import TINY_ARGS, run_cli

L = pytest.importorskip("lightning")
transformers = pytest.importorskip("transformers")

from tests.test_adapters import HF_SPEC  # noqa: E402

LAUNCH = ["device=cpu", "launch.nproc_per_node=2", "study.numerics_steps=0"]
KNOBS: dict[str, Any] = {
    "batch_size": 8, "num_workers": 1, "pin_memory": False, "prefetch_factor": 2,
    "persistent_workers": False, "amp": "off", "compile": "off", "tf32": False,
    "cudnn_benchmark": False, "optimizer_impl": "default", "non_blocking": False,
    "channels_last": False, "host_allocator": "default", "cpu_threads": None,
    "pad_to_multiple_of": None, "attention": "default", "padding_free": False,
    "bucket_cap_mb": 5, "gradient_as_bucket_view": True, "static_graph": True,
    "broadcast_buffers": False, "batched_grad_copy": True, "comm_hook": "bf16"}


def _launched(knobs: dict[str, Any] = KNOBS, find_unused: bool = False) -> dict[str, Any]:
    """best.yaml's document of a study launched as 2 ranks (results/export.py's sections)."""
    return {"knobs": dict(knobs), "device": {"type": "cpu"}, "launch": {"nproc_per_node": 2},
            "ddp_kwargs": {**ddp_kwargs(knobs), "find_unused_parameters": find_unused}}


def test_hf_export_under_ranks_is_real_training_arguments_ddp_fields(tmp_path: Path) -> None:
    from autotune.adapters.hf import training_arguments_kwargs

    fields = training_arguments_kwargs(_launched())
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **fields)
    assert args.ddp_bucket_cap_mb == 5 and args.ddp_static_graph is True
    assert args.ddp_broadcast_buffers is False
    # Explicit: left unset, the Trainer turns find_unused_parameters on for this model.
    assert args.ddp_find_unused_parameters is False
    assert args.per_device_train_batch_size == 8 and args.dataloader_num_workers == 1  # per rank
    one = training_arguments_kwargs({"knobs": KNOBS, "device": {"type": "cpu"}})
    assert not any(k.startswith("ddp_") for k in one)  # one process: the user's own fields


def test_hf_apply_puts_the_ddp_arguments_on_the_real_accelerator(tmp_path: Path) -> None:
    """What no TrainingArguments field holds goes on the Accelerator's DDP kwargs handler,
    which its prepare() passes to DistributedDataParallel (to_kwargs) and whose hook it
    registers; the fields go on the Trainer's arguments."""
    from accelerate.utils import DDPCommunicationHookType

    from autotune.adapters import hf
    from examples.hf_trainer_tune import users_trainer

    trainer = users_trainer(str(tmp_path / "out"), "cpu")
    assert trainer.accelerator.ddp_handler.to_kwargs() == {"find_unused_parameters": True}
    threads = torch.get_num_threads()
    try:
        hf.apply(trainer, _launched())
    finally:
        torch.set_num_threads(threads)
    handler = trainer.accelerator.ddp_handler
    passed = handler.to_kwargs()
    assert passed["gradient_as_bucket_view"] is True and passed["static_graph"] is True
    assert passed["bucket_cap_mb"] == 5 and passed["broadcast_buffers"] is False
    assert "find_unused_parameters" not in passed  # False: DDP's default
    assert passed.get("batched_grad_copy") is (True if has_ddp_argument("batched_grad_copy")
                                               else None)
    assert handler.comm_hook == DDPCommunicationHookType.BF16
    assert trainer.args.ddp_bucket_cap_mb == 5 and trainer.args.ddp_find_unused_parameters is False


def test_hf_sync_each_batch_carries_the_measured_accumulation_no_sync(tmp_path: Path) -> None:
    """Ranks that accumulate: accelerate's ``sync_each_batch`` (accelerator_config's
    gradient_accumulation_kwargs) is the opposite of the baseline's accumulation_no_sync, read
    from the user's Trainer and written back as measured, where the Trainer's loop reads it
    (its Accelerator's gradient_state, transformers 5.24). The user's own key survives apply:
    the Trainer folds num_steps into their dict, which it refuses when rebuilt with
    accumulation. Broken once (the export without gradient_accumulation_kwargs), it failed."""
    import dataclasses

    from autotune.adapters import hf
    from autotune.adapters.hf.workload import HFTrainerWorkload
    from autotune.core.shipping import ship
    from examples.hf_trainer_tune import users_trainer

    accumulating = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}
    assert build_workload({**HF_SPEC, "training_args": accumulating}
                          ).defaults["accumulation_no_sync"] is True  # accelerate's default
    own = {"gradient_accumulation_kwargs": {"sync_each_batch": True, "sync_with_dataloader": False}}
    trainer = users_trainer(str(tmp_path / "out"), "cpu")
    trainer.args = dataclasses.replace(trainer.args, gradient_accumulation_steps=2,
                                       accelerator_config=own)
    trainer.create_accelerator_and_postprocess()  # as the user's Trainer(args=...) builds it
    parts = hf.trainer_parts(trainer)
    shipped = HFTrainerWorkload(str(ship(parts.parts, tmp_path / "ship", parts.names)))
    assert shipped.defaults["accumulation_no_sync"] is False and shipped.defaults["grad_accum"] == 2

    def synced(no_sync: bool, **doc: Any) -> bool:
        knobs = {**KNOBS, "accumulation_no_sync": no_sync}
        threads = torch.get_num_threads()
        try:
            hf.apply(trainer, {**_launched(knobs), "grad_accum": 2, **doc})
        finally:
            torch.set_num_threads(threads)
        state = trainer.accelerator.gradient_state.plugin_kwargs
        assert trainer.args.accelerator_config.gradient_accumulation_kwargs[
            "sync_with_dataloader"] is False  # the user's own key, kept
        return bool(state.get("sync_each_batch", False))

    # One process, or no accumulation: nothing to synchronize; the user's own setting stays.
    assert synced(True, launch=None) is True and synced(True, grad_accum=1) is True
    assert synced(True) is False and synced(False) is True


def test_lightning_export_under_ranks_is_a_real_ddp_strategy(tmp_path: Path) -> None:
    from lightning.pytorch.strategies import DDPStrategy

    from autotune.adapters.lightning import lightning_document, trainer_kwargs

    doc = _launched()
    kwargs = trainer_kwargs(doc)
    strategy = kwargs["strategy"]
    assert isinstance(strategy, DDPStrategy) and kwargs["devices"] == 2
    assert strategy._ddp_kwargs == {**ddp_kwargs(KNOBS), "find_unused_parameters": False}
    assert strategy._ddp_kwargs["gradient_as_bucket_view"] is True
    assert strategy._ddp_comm_hook.__name__ == "bf16_compress_hook"
    trainer = L.Trainer(**kwargs, accelerator="cpu", logger=False, default_root_dir=tmp_path)
    assert trainer.strategy is strategy and trainer.num_devices == 2
    written = yaml.safe_load(yaml.safe_dump(lightning_document(doc)))  # plain YAML
    assert written["trainer"]["devices"] == 2
    assert written["strategy"]["kwargs"] == strategy._ddp_kwargs
    assert written["strategy"]["ddp_comm_hook"].endswith("bf16_compress_hook")
    one = trainer_kwargs({**doc, "launch": None})
    assert "strategy" not in one and "devices" not in one


def test_hf_trials_find_unused_parameters_as_the_trainer_does(cpu_env: Env) -> None:
    """transformers' Trainer._build_accelerator_args: the user's field, else on for a
    PreTrainedModel unless it checkpoints activations, on for any other model."""
    wl = build_workload(HF_SPEC)
    knobs = build_space(cpu_env, wl, {}).baseline
    model = wl.model()
    assert wl.ddp_arguments(model, knobs) == {"find_unused_parameters": True}
    assert wl.ddp_arguments(model, {**knobs, "activation_checkpointing": True}) == {
        "find_unused_parameters": False}
    assert wl.ddp_arguments(torch.nn.Linear(2, 2), knobs)["find_unused_parameters"] is True
    own = build_workload({**HF_SPEC, "training_args": {
        "per_device_train_batch_size": 4, "ddp_find_unused_parameters": False,
        "ddp_bucket_cap_mb": 100, "ddp_static_graph": True}})
    assert own.ddp_arguments(model, knobs) == {"find_unused_parameters": False}
    # The user's DDP fields are the baseline's DDP knobs.
    assert own.defaults["bucket_cap_mb"] == 100 and own.defaults["static_graph"] is True


def test_a_launched_hf_study_runs_every_trial_as_ranks_and_exports_ddp_fields(
        tmp_path: Path) -> None:
    """The adapter's workload under launch.nproc_per_node=2: every trial ran as 2 gloo ranks
    with the Trainer's find_unused_parameters (on: a PreTrainedModel without checkpointing),
    and training_args.yaml builds TrainingArguments with the measured DDP fields."""
    config = ("{n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 128, n_positions: 32, "
              "bos_token_id: 0, eos_token_id: 0}")
    proc = run_cli(["workload._target_=autotune.adapters.hf.HFWorkload",
                    "+workload.model=transformers.GPT2LMHeadModel",
                    "+workload.config=transformers.GPT2Config", f"+workload.config_args={config}",
                    "+workload.dataset=examples.hf_tune.tokens",
                    "+workload.dataset_args={n: 256, seq_len: 32, vocab_size: 128}",
                    "+workload.training_args={per_device_train_batch_size: 4}", "study.name=hfr",
                    "study.n_trials=1", "study.confirm_runs=0", *LAUNCH, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "hfr"
    with open(out / "trials.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["state"] == "COMPLETE"]
    assert rows and all(r["ranks"] == "2" for r in rows)
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["ddp_kwargs"]["find_unused_parameters"] is True  # the Trainer's rule, as run
    fields = yaml.safe_load((out / "training_args.yaml").read_text())
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), **fields)
    assert args.ddp_find_unused_parameters is True
    assert args.ddp_bucket_cap_mb == best["knobs"]["bucket_cap_mb"]
    assert args.ddp_static_graph == best["knobs"]["static_graph"]
    assert args.ddp_broadcast_buffers == best["knobs"]["broadcast_buffers"]
    assert args.dataloader_num_workers == best["knobs"]["num_workers"]  # per rank

    # verify: the user's Trainer.train as the study's 2 ranks under torchrun, both sides, the
    # framework's own DDP; rank 0 writes the ranks' summed rates
    proc = run_cli(["verify", str(out), "--rounds", "1", "--steps", "6", "--warmup", "2"],
                   tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Trainer.train, as 2 ranks under torchrun" in proc.stdout
    verified = json.loads((out / "verify.json").read_text())
    for side in ("baseline", "exported"):
        assert all(r["ranks"] == 2 and r["over_ranks"] == "summed" for r in verified["figures"][side])


def test_hf_length_grouping_under_ranks_is_refused_with_why(tmp_path: Path) -> None:
    """Each rank's sampler is a DistributedSampler: a Trainer that groups by length is not
    what the trials would run, so it is refused before any trial, saying what to change."""
    grouping = ("{per_device_train_batch_size: 4, train_sampling_strategy: group_by_length}"
                if "train_sampling_strategy" in transformers.TrainingArguments.__dataclass_fields__
                else "{per_device_train_batch_size: 4, group_by_length: true}")
    proc = run_cli(["workload._target_=autotune.adapters.hf.HFWorkload",
                    "+workload.model=transformers.GPT2LMHeadModel",
                    "+workload.config=transformers.GPT2Config",
                    "+workload.config_args={n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 128}",
                    "+workload.dataset=examples.hf_tune.tokens",
                    "+workload.dataset_args={n: 64, seq_len: 32, vocab_size: 128}",
                    f"+workload.training_args={grouping}", "study.name=g", *LAUNCH],
                   tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "group samples by length" in proc.stderr and "DistributedSampler" in proc.stderr
    assert not (tmp_path / "studies" / "g" / "trials").exists()


def test_a_launched_lightning_study_is_verified_as_its_ranks(tmp_path: Path) -> None:
    """A Lightning study of 2 ranks, then `autotune verify` without a script: each side is
    the user's own Trainer.fit as 2 ranks under torchrun (the exported DDPStrategy on one
    side, Lightning's default DDP on the other), and rank 0 writes the ranks' summed rates."""
    proc = run_cli(["workload._target_=autotune.adapters.lightning.LightningWorkload",
                    "+workload.module=examples.lightning_tune.Classifier",
                    "+workload.datamodule=examples.lightning_tune.RandomData", "study.name=lr",
                    "study.n_trials=1", "study.confirm_runs=0", *LAUNCH, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "studies" / "lr"
    proc = run_cli(["verify", str(out), "--rounds", "1", "--steps", "6", "--warmup", "2"],
                   tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Trainer.fit, as 2 ranks under torchrun" in proc.stdout
    verified = json.loads((out / "verify.json").read_text())
    for side in ("baseline", "exported"):
        assert all(r["ranks"] == 2 and r["over_ranks"] == "summed" for r in verified["figures"][side])
    log = (out / "verify" / "0-exported.log").read_text()
    assert "MEMBER: 1/2" in log and "MEMBER: 2/2" in log  # Lightning's own word for its ranks
