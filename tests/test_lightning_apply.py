"""Applying a Lightning result twice is applying it once: ``tune()`` prepares the module and
DataModule it was given, and the documentation then passes them through ``tuned.apply``; each
hook must still be wrapped once around the user's own (one check at train start, one
optimizer rebuild, one loader rebuild), with a real ``lightning.Trainer`` fitting them."""

from __future__ import annotations

import traceback
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning")

import autotune  # noqa: E402
from autotune.adapters import lightning as at_lightning  # noqa: E402
from autotune.core.knobs import KNOBS  # noqa: E402
from autotune.production.runtime import KnobOverridden  # noqa: E402

ADAPTER = at_lightning.__file__


def _depth(hook: str) -> int:
    """How many of autotune's wrappers of ``hook`` are on the stack right now."""
    return sum(1 for f in traceback.extract_stack()
               if f.filename == ADAPTER and f.name == hook)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))
        self.depths: dict[str, int] = {}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        self.depths["configure_optimizers"] = _depth("configure_optimizers")
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}

    def on_train_start(self) -> None:
        self.depths["on_train_start"] = _depth("on_train_start")


class Data(L.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.depths: dict[str, int] = {}

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(64, 3, 8, 8, generator=g),
                                       torch.randint(0, 4, (64,), generator=g))

    def train_dataloader(self) -> DataLoader:
        self.depths["train_dataloader"] = _depth("train_dataloader")
        return DataLoader(self.train_set, batch_size=4, shuffle=True)


def _best(**knobs: Any) -> dict[str, Any]:
    """A best.yaml document: every knob off, batch 16 in the training process, as given."""
    base = {k.name: k.off for k in KNOBS}
    base.update(batch_size=16, num_workers=0, cpu_threads=None, host_allocator="default",
                amp="bf16", optimizer_impl="foreach")
    return {"knobs": {**base, **knobs}, "grad_accum": 1}


def _fit(module: Any, data: Any) -> Any:
    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, precision="32-true",
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, data)
    return trainer, [w for w in caught if issubclass(w.category, KnobOverridden)]


def test_applying_what_tune_prepared_wraps_each_hook_once() -> None:
    best = _best()
    module, data = Classifier(), Data()
    tuned = at_lightning._tuned(best, module, data, None)  # what tune() returns, no study
    module, data = tuned.apply(module, data)  # the documented line, on prepared objects
    module, data = tuned.apply(module, data)  # and once more
    trainer, overridden = _fit(module, data)
    assert trainer.global_step == 2
    assert module.depths == {"configure_optimizers": 1, "on_train_start": 1}
    assert data.depths == {"train_dataloader": 1}
    # The one check at train start: this Trainer runs fp32 where bf16 was measured.
    assert len(overridden) == 1 and "precision='32-true'" in str(overridden[0].message)
    opt = trainer.optimizers[0]
    assert all(g["foreach"] for g in opt.param_groups)
    assert trainer.lr_scheduler_configs[0].scheduler.optimizer is opt
    assert trainer.train_dataloader.batch_size == 16  # rebuilt once, from the user's loader


def test_a_later_result_replaces_the_earlier_preparation() -> None:
    module, data = Classifier(), Data()
    at_lightning.prepare_module(module, _best(optimizer_impl="foreach"))
    at_lightning.prepare_datamodule(data, _best(batch_size=16))
    module = at_lightning.prepare_module(module, _best(optimizer_impl="default", amp="off",
                                                           batch_size=8))
    data = at_lightning.prepare_datamodule(data, _best(batch_size=8))
    trainer, overridden = _fit(module, data)
    assert not overridden  # the second result's precision is the Trainer's: no stale check
    assert not any(g.get("foreach") for g in trainer.optimizers[0].param_groups)
    assert trainer.train_dataloader.batch_size == 8
    assert module.depths == {"configure_optimizers": 0, "on_train_start": 1}


def test_a_compiled_preparation_is_compiled_once() -> None:
    module = Classifier()
    best = _best(compile="default")
    first = at_lightning.prepare_module(module, best)
    again = at_lightning.prepare_module(first, best)  # the compiled module passed back in
    assert type(first._orig_mod) is Classifier
    assert type(again._orig_mod) is Classifier and again._orig_mod is module


def test_a_module_prepared_sharded_then_unsharded_trains_without_the_sharding_hook() -> None:
    """A sharded study's preparation gives the module a ``configure_model`` that shards it over
    ModelParallelStrategy's device mesh; preparing it again with an unsharded result takes that
    hook away with the rest of the earlier preparation: the plain Trainer's fit calls
    ``configure_model`` too, where ``device_mesh`` is None (a TypeError once)."""
    sharded = {**_best(sharding="full_shard", fsdp_wrap_blocks=1),
               "launch": {"nproc_per_node": 2, "nnodes": 1}}
    module, data = Classifier(), Data()
    threads = torch.get_num_threads()
    try:
        at_lightning.prepare_module(module, sharded)
        assert "configure_model" in vars(module)  # the sharding hook, on the instance
        module = at_lightning.prepare_module(module, _best(amp="off"))
    finally:
        torch.set_num_threads(threads)
    trainer, _ = _fit(module, data)
    assert trainer.global_step == 2


#: best.yaml's statement of an answer that changes what is trained (results/answers.py).
CHANGES = {"this": {"changes": {"batch_size": "batch_size 4 -> 16: 4x fewer optimizer steps "
                                              "per epoch at the same learning rate"},
                    "learning_rate": "scale the learning rate x4 (the linear rule for SGD)"},
           "other": {"file": "best-same-training.yaml", "trial": 3, "changes": {}}}


def test_an_answer_that_changes_training_says_so_as_it_is_applied() -> None:
    """Lightning's prepare_module and the plain loop's Runtime (hf.apply: test_adapters_live)
    say what the answer changes and where the one that keeps the training is; one that
    changes nothing is applied without a word of it."""
    from autotune.production.best import ChangesTraining

    changed = {**_best(), "training": CHANGES}
    for apply in (lambda best: at_lightning.prepare_module(Classifier(), best),
                  lambda best: autotune.Runtime({"schema": 1, **best}, device="cpu")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            apply(changed)
            apply(_best())
        said = [str(w.message) for w in caught if issubclass(w.category, ChangesTraining)]
        assert len(said) == 1, said
        assert "batch_size 4 -> 16" in said[0] and "scale the learning rate x4" in said[0]
        assert "best-same-training.yaml (trial 3)" in said[0]
