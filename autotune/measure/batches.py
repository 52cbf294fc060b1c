"""CHILD side: the endless batch feed a window, a ceiling and a numerics run step through."""

from __future__ import annotations

import time
from typing import Any

from autotune.core import distributed
from autotune.core.tokens import SAMPLES, TOKENS
from autotune.core.training import Training

#: transformers' LengthGroupedSampler: mega-batches of at most this many batches
#: (``get_length_grouped_indices``' default ``mega_batch_mult``).
MEGA_BATCH_MULT = 50


class TokensLost(RuntimeError):
    """A batch without tokens in a window measuring tokens/s: its figure would mix units."""


def length_group_steps(loader: Any) -> int:
    """The batches of one length group of ``loader``'s sampler: 1 for any sampler but a
    length-grouped one. transformers' ``LengthGroupedSampler`` shuffles, cuts the order into
    mega-batches of ``mega_batch_mult`` batches and sorts each longest first, so consecutive
    steps see ever shorter batches; only whole mega-batches carry the dataset's mix of lengths.
    A sampler of autotune's own may say so itself with ``group_steps``."""
    sampler = getattr(loader, "sampler", None)
    own = getattr(sampler, "group_steps", None)
    if isinstance(own, int) and own > 0:
        return own
    lengths, batch = getattr(sampler, "lengths", None), getattr(sampler, "batch_size", None)
    if lengths is None or not isinstance(batch, int) or batch <= 0 or \
            "LengthGrouped" not in type(sampler).__name__:
        return 1
    return max(1, min(len(lengths) // (batch * 4), MEGA_BATCH_MULT))


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
        self.in_epoch = 0  # batches taken since the current epoch began
        self.unit: str | None = None  # set by the first batch: tokens/s where it has tokens
        self.last_tokens: tuple[int, int] | None = None  # (real, computed) of the last batch
        self.ranks = distributed.world_size()

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()  # an epoch's end shuts its workers down in the next() below
        if self._it is not None:
            try:
                batch = next(self._it)
            except StopIteration:
                pass
            else:
                self.in_epoch += 1
                return self._counted(self.run.split(batch))
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
        self.in_epoch = 1
        return self._counted(self.run.split(batch))

    def _counted(self, pair: tuple[Any, Any]) -> tuple[Any, Any]:
        """Count the batch's tokens on the host, before its copy (Workload.tokens); the first
        batch decides the unit of everything the window reports."""
        self.last_tokens = self.run.workload.tokens(pair[0])
        if self.unit is None:
            self.unit = TOKENS if self.last_tokens is not None else SAMPLES
        elif self.unit == TOKENS and self.last_tokens is None:
            raise TokensLost(
                "a batch without tokens (Workload.tokens returned None) after batches with "
                "them: the window cannot measure tokens/s. Make Workload.tokens count every "
                "batch, or return None for all of them (samples/s).")
        return pair

    def closed_group(self, group: int) -> bool:
        """Whether the last batch taken closed a length group of ``group`` batches (a
        mega-batch of a length-grouped sampler; an epoch's last batch closes its last, shorter
        one). Every rank's sampler has the same lengths, so every rank answers alike."""
        if group <= 1:
            return True
        try:
            per_epoch = len(self.run.loader)
        except TypeError:  # an iterable dataset's loader has no length
            per_epoch = 0
        return self.in_epoch % group == 0 or self.in_epoch == per_epoch

    def units(self, samples: int) -> float:
        """The last batch in the window's unit: its real tokens, times the ranks (each rank
        counts only its own batch; measure/ranks.py sums the ranks' exact counts), where the
        batches carry tokens; else ``samples``, the run's samples per step."""
        if self.unit == TOKENS and self.last_tokens is not None:
            return float(self.last_tokens[0] * self.ranks)
        return float(samples)
