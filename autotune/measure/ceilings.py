"""Mock components, measured inside a trial (CHILD side): the loader alone and the
step alone. A trial cannot train faster than either, which is what lets the driver prune on
them (autotune/search/pruning.py), so each must be an upper bound: measured in steady state, with its
noise stated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune.core.config import WindowConfig, sized
from autotune.core.training import Training
from autotune.measure.clock import Clock
from autotune.measure.readings import Progress


def _units(batches: Any, batch_size: int) -> float:
    """The last batch in the window's unit (measure/batches.Batches.units): its real tokens
    where the batches carry them, else ``batch_size`` samples."""
    units = getattr(batches, "units", None)
    return float(units(batch_size)) if callable(units) else float(batch_size)


def loader_ceiling(batches: Any, batch_size: int, workers: int, win: WindowConfig,
                   progress: Progress | None = None) -> tuple[float, float]:
    """A mock trainer: the loader alone, every batch discarded. The rate the input
    pipeline delivers in steady state, in the window's unit (samples/s, or real tokens/s: the
    slope of batches times their mean tokens), and its noise (relative spread).

    Not the start-up ramp, not the first burst: the first batch (worker start-up) and the first
    round after it (workers start one after another) are not timed; batches then arrive in
    rounds, ``workers`` at once, so a rate read from a count over a time starting mid-round
    counts a round for free (11 workers at 10 ms an item read 1,439 samples/s where the limit
    is 1,100). The rate is the least-squares slope of batches received over their arrival
    times, which a staircase of rounds does not bias. At least eight rounds, 16 batches and
    ``min_measure_seconds`` are timed (four rounds of 2 workers read 10-20% off on a loaded VM). Its
    noise is the spread of the same slope over the two halves of the timed batches.

    The rate so far goes out with every heartbeat, so the driver can stop a loader that is
    already far too slow without waiting for the whole measurement."""
    next(batches)
    rounds = max(1, workers)
    ramp, need = rounds, rounds + max(8 * rounds, 16)
    min_s = win.min_measure_seconds
    cap_s = sized(win.measure_seconds) / 2
    arrivals: list[float] = []
    units: list[float] = []
    start = time.perf_counter()
    while True:
        next(batches)
        arrivals.append(time.perf_counter() - start)
        units.append(_units(batches, batch_size))
        n, t = len(arrivals), arrivals[-1]
        if progress is not None:
            progress.partial = {"kind": "loader", "rate": sum(units) / t, "batches": n}
            progress.beat("ceiling", n)
        if n >= need and t >= min_s:
            break
        if t >= cap_s and n >= ramp + 4:  # a slow loader: what the time allows
            break
    steady = arrivals[ramp:]
    per_batch = sum(units[ramp:]) / len(units[ramp:])
    rate = _slope(steady) * per_batch
    half = len(steady) // 2
    halves = [_slope(steady[:half + 1]), _slope(steady[half:])]
    noise = (max(halves) - min(halves)) * per_batch / rate if rate > 0 else 0.0
    return rate, noise


def _slope(times: list[float]) -> float:
    """Items per second: the least-squares slope of item index over arrival time."""
    n = len(times)
    mean_t, mean_i = sum(times) / n, (n - 1) / 2
    var = sum((t - mean_t) ** 2 for t in times)
    if var <= 0:
        return float("inf")
    return sum((t - mean_t) * (i - mean_i) for i, t in enumerate(times)) / var


def compute_ceiling(run: Training, batches: Any, batch_size: int, win: WindowConfig,
                    clock: Clock, beat: Callable[[int], None] = lambda step: None
                    ) -> tuple[float, float]:
    """A mock loader: one batch kept on the device, the step alone. The rate the
    model can train at with a free input pipeline, in the window's unit (that batch's real
    tokens per step where it has tokens), and its noise (relative spread).

    Timed in two halves, each at least half of ``measure_steps`` and a quarter of
    ``min_measure_seconds`` (six 1 ms steps read 904 samples/s for a step whose window trained
    at 1,452 on a loaded VM), at most a quarter of ``measure_seconds``; the device is
    synchronized at each half's end. The noise is the spread of the two halves' rates.

    The cap is read after every step, not only at the ``steps`` multiples the floor is checked
    at: beside `stress-ng --cpu 1` a 3.5 s CPU step made the two halves 16 steps (56 s), the
    re-measure doubled it, and the trial went 120 s without a heartbeat and was killed as
    stalled. ``beat`` is called after each step so the watchdog sees the ceiling progress."""
    inputs, targets = run.to_device(*next(batches))  # the model is warm: no extra warm-up
    per_step = _units(batches, batch_size)
    clock.sync(run.device)
    steps = max(2, sized(win.measure_steps) // 2)
    min_s = win.min_measure_seconds / 4
    cap_s = sized(win.measure_seconds) / 4
    rates, total_n, total_s = [], 0, 0.0
    for _ in range(2):
        n, start = 0, time.perf_counter()
        while True:
            run.step(inputs, targets)  # no sync inside: ``steps`` bounds the queued work
            n += 1
            beat(total_n + n)
            # The host's clock runs ahead of a GPU's work, never behind it: past the cap on
            # the host is past it on the device too.
            over = time.perf_counter() - start >= cap_s
            if n % steps == 0 or over:
                clock.sync(run.device)
                t = time.perf_counter() - start
                if t >= min_s or t >= cap_s:
                    break
        rates.append(n * per_step / t)
        total_n, total_s = total_n + n, total_s + t
    rate = total_n * per_step / total_s
    return rate, abs(rates[0] - rates[1]) / rate
