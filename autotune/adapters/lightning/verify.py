"""One side of ``autotune verify`` for a Lightning study: the user's own ``Trainer.fit``.

The baseline side fits the user's module on their data with their Trainer arguments; the
exported side first calls ``autotune.adapters.lightning.prepare_module`` and
``prepare_datamodule`` (or ``prepare_loader``) and adds the exported Trainer arguments, exactly
what the README tells a user to do, so verify measures those calls too. Both fit ``warmup +
steps`` batches (``max_steps``; no checkpoints; loggers write to a temporary folder) and a
callback times each batch (autotune/production/parity.StepClock). Arguments:
autotune/production/parity.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import torch

from autotune.adapters.lightning import prepare_datamodule, prepare_loader, prepare_module
from autotune.adapters.lightning.workload import (
    LightningObjectsWorkload,
    LightningWorkload,
    trainer_kwargs,
)
from autotune.core.batch import tensors
from autotune.core.quick_exit import quick_exit
from autotune.production.best import load_best
from autotune.production.parity import StepClock, load_workload, side_args, write


def timer(clock: StepClock) -> Any:
    import lightning.pytorch as pl

    class BatchTimer(pl.Callback):
        """on_train_batch_start comes after the batch is fetched and moved; on_train_batch_end
        after the optimizer step (with accumulation, after the backward): between them the
        step; between an end and the next start, the next batch and the loop's own work."""

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, idx: int) -> None:
            clock.begin()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any,
                               idx: int) -> None:
            leaves = tensors(batch)
            clock.end(int(leaves[0].shape[0]) if leaves and leaves[0].ndim else 1)

    return BatchTimer()


def main(argv: Sequence[str] | None = None) -> None:
    import lightning.pytorch as pl

    args = side_args(argv)
    workload = load_workload(args)
    assert isinstance(workload, LightningWorkload), type(workload)
    module = workload._new_module()
    datamodule = workload.new_datamodule()
    loader: Any = None
    if datamodule is None:
        loader = (workload.new_loader() if isinstance(workload, LightningObjectsWorkload)
                  else workload.loader)
    kwargs = dict(workload.trainer_kwargs)
    if args.side == "exported":
        best = load_best(args.config, check_environment=False)
        module = prepare_module(module, best)
        if datamodule is not None:
            datamodule = prepare_datamodule(datamodule, best)
        else:
            loader = prepare_loader(loader, best)
        kwargs.update(trainer_kwargs(best))
    clock = StepClock(args.warmup, torch.device(args.device))
    with tempfile.TemporaryDirectory() as out:
        # Under torchrun (a study of ranks), every rank fits with the run's devices: the
        # exported side's DDPStrategy, the baseline's Lightning default for them.
        world = int(os.environ.get("WORLD_SIZE", "1"))
        kwargs.update(max_steps=args.warmup + args.steps, max_epochs=-1, default_root_dir=out,
                      enable_checkpointing=False, accelerator=args.device, devices=world)
        if world == 1:
            kwargs.pop("strategy", None)
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), timer(clock)]
        trainer = pl.Trainer(**kwargs)
        if datamodule is not None:
            trainer.fit(module, datamodule=datamodule)
        else:
            trainer.fit(module, train_dataloaders=loader)
    clock.finish()
    write(args, {**clock.result(), "precision": str(kwargs.get("precision", "32-true"))})


if __name__ == "__main__":
    main(sys.argv[1:])
    quick_exit(0)  # a side's process ends so: parity.py's docstring
