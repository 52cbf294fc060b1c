"""CHILD side: the endless batch feed a window, a ceiling and a numerics run step through."""

from __future__ import annotations

import time
from typing import Any

from autotune.core.training import Training


class Batches:
    """Endless ``(inputs, targets)`` pairs, split by the workload's batch convention (a
    Mapping batch is all inputs). A new epoch (and, without persistent workers, new worker
    processes) starts when the loader runs out; that cost is part of the configuration's
    speed, and is counted: ``epochs`` started and ``epoch_start_s``, the seconds spent getting
    each epoch's first batch (the old workers' shutdown and the new ones' start-up)."""

    def __init__(self, run: Training):
        self.run = run
        self.epochs, self.epoch_start_s = 0, 0.0
        self._it: Any = None

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()  # an epoch's end shuts its workers down in the next() below
        if self._it is not None:
            try:
                return self.run.split(next(self._it))
            except StopIteration:
                pass
        self._it = None
        order: Any = getattr(self.run.loader, "sampler", None)
        if hasattr(order, "set_epoch"):  # a rank's DistributedSampler: reshuffle per epoch
            order.set_epoch(self.epochs)
        self._it = iter(self.run.loader)
        self.epochs += 1
        try:
            batch = next(self._it)
        except StopIteration:
            raise RuntimeError(
                "the loader yielded no batch: dataset smaller than batch_size with drop_last"
            ) from None
        self.epoch_start_s += time.perf_counter() - t0
        return self.run.split(batch)
