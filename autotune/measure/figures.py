"""What the measured loop recorded (``Loop``) and the figures made of it (CHILD side):
throughput, step-time percentiles, each phase's share, the window's own noise, and the chunk
edges the pruner reads. Kept apart from loop.py, which runs the loop, so that the loop reads
top to bottom without its arithmetic."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.core import distributed
from autotune.core.tokens import SAMPLES, TOKENS
from autotune.measure.clock import Clock
from autotune.measure.protocol import WindowResult
from autotune.measure.readings import Progress, loader_cpu_share, receive_share


@dataclass
class Loop:
    """What the measured loop recorded: per step, the host's wait for its batch and four marks
    on the device's timeline (copy start, copy end, forward+backward end, optimizer end)."""

    loss: torch.Tensor
    marks: list[tuple[Any, Any, Any, Any]]
    data_wait_ms: list[float]
    elapsed_s: float
    page_faults: int
    # This thread's CPU demand while it waited: loading (num_workers=0), or receiving the
    # workers' batches (num_workers > 0).
    data_cpu_s: float
    workers_cpu_s: float  # the DataLoader workers' CPU over the window
    epoch_starts: int = 0  # epochs begun inside the window
    epoch_start_s: float = 0.0  # seconds waiting for those epochs' first batches
    input_shapes: dict[str, Any] = field(default_factory=dict)  # core/batch.ShapeLog.summary
    # Per step, in the window's unit (measure/batches.Batches.units): the run's samples, or
    # the real tokens of every rank's batch; and this process's own (real, computed) tokens.
    units: list[float] = field(default_factory=list)
    tokens: list[tuple[int, int]] = field(default_factory=list)
    unit: str = SAMPLES
    length_groups: dict[str, int] = field(default_factory=dict)
    epoch_start_steps: list[int] = field(default_factory=list)  # steps that began an epoch
    refill_steps: int = 1  # loop.refill_steps: the steps an epoch's new workers prefetch over
    epoch_start_cpu_s: float = 0.0  # the part of data_cpu_s spent in epoch-starting waits


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _step_units(loop: Loop, batch_size: int) -> list[float]:
    """Each step in the window's unit (a loop recorded without them: ``batch_size`` samples)."""
    return loop.units if len(loop.units) == len(loop.marks) else [float(batch_size)] * len(loop.marks)


def window_spread(loop: Loop, clock: Clock, batch_size: int) -> float:
    """The measured window's noise: the relative spread of its two halves' throughputs (the
    same estimate the compute ceiling states for itself). 0 for a window too short to split.

    At least 4 timed steps (5 marks): a CPU's 4-step windows (window.min_measure_steps) split
    2 against 1 read one slow step as the window's noise. Tried on 2026-12-07, a GPT study's
    baseline window read 98% and another 29% (the finalists 2-10%), and a trial 9% faster
    than the best was not declared the best within that noise (results/trials.beats); and the
    selection's first stage, cut to 3 rounds by a known noise, did not decide between its
    finalists 3% apart within the 4 rounds its budget held either."""
    marks, n = loop.marks, len(loop.marks)
    if n < 5:
        return 0.0
    half = n // 2
    ms = [clock.ms(marks[0][3], marks[half][3]), clock.ms(marks[half][3], marks[-1][3])]
    if min(ms) <= 0:
        return 0.0
    units = _step_units(loop, batch_size)  # step i's units are done at its end mark
    rates = [sum(units[1:half + 1]) / ms[0], sum(units[half + 1:]) / ms[1]]
    return abs(rates[0] - rates[1]) / (sum(rates) / 2)


def summarize(result: WindowResult, loop: Loop, clock: Clock, progress: Progress,
              batch_size: int, workers: int) -> None:
    """Throughput, step-time percentiles and each phase's share of the window."""
    n, marks = len(loop.marks), loop.marks
    total_ms = loop.elapsed_s * 1e3
    step_ms = [clock.ms(marks[i - 1][3], marks[i][3]) for i in range(1, n)] or [total_ms]
    result.steps, result.samples, result.measure_s = n, n * batch_size, loop.elapsed_s
    result.samples_per_sec = n * batch_size / loop.elapsed_s
    count_tokens(result, loop)
    result.chunks = list(progress.chunks)
    result.input_shapes = loop.input_shapes
    result.step_ms = {
        "median": statistics.median(step_ms),
        "p10": percentile(step_ms, 0.1),
        "p90": percentile(step_ms, 0.9),
        "p25": percentile(step_ms, 0.25),  # the quartiles: the window's noise, IQR/median
        "p75": percentile(step_ms, 0.75),
        "mean": total_ms / n,
    }
    wait_s = sum(loop.data_wait_ms) / 1e3
    result.timers = {
        "data_wait": wait_s * 1e3 / total_ms,
        "h2d": sum(clock.ms(m[0], m[1]) for m in marks) / total_ms,
        "compute": sum(clock.ms(m[1], m[2]) for m in marks) / total_ms,
        "optimizer": sum(clock.ms(m[2], m[3]) for m in marks) / total_ms,
        "step_ms": total_ms / n,
        # Pages the training process faulted in per step (freshly mapped memory, zeroed by
        # the kernel): the symptom of an allocator that unmaps what the step frees.
        "page_faults_per_step": loop.page_faults / n,
        # The share of the loader's time its processes spent on a CPU: near 1, loading is
        # computation (decode, augment) and workers beyond the cores cannot help; near 0, it
        # waits (storage, network, a sleep) and more workers than cores can.
        "loader_cpu_share": loader_cpu_share(workers, loop.data_cpu_s, wait_s,
                                              loop.workers_cpu_s, loop.elapsed_s),
        # With workers, the share of the wait the training process itself was busy: taking
        # each batch off the workers' queue (unpickling it, receiving its shared memory).
        # Near 1, the workers are ahead and that transfer is the input's limit, which more
        # workers cannot raise (epoch starts left out: their forks are start-up).
        "loader_receive_share": receive_share(
            workers, loop.data_cpu_s - loop.epoch_start_cpu_s, wait_s - loop.epoch_start_s),
        # Epochs begun inside the window, and the share of it spent getting their first
        # batches: without persistent workers, shutting down and starting up every worker.
        "epoch_starts": loop.epoch_starts,
        "epoch_start_share": loop.epoch_start_s * 1e3 / total_ms,
        # ... and all they cost: those waits and the steps slower than the others while the
        # new workers started and filled their prefetch.
        "epoch_start_cost_share": epoch_start_cost_ms(loop, step_ms) / total_ms,
    }


def epoch_start_cost_ms(loop: Loop, step_ms: list[float]) -> float:
    """What the window's epoch starts cost: each one's first step and the steps after it while
    its workers refill their prefetch (``loop.refill_steps``), above the median of the other
    steps; at least their first batches' waits. Without persistent workers every epoch shuts
    its workers down and forks new ones, and on a 2-core machine their start-up runs beside
    the step: the README's ResNet-18 at batch 128 with one worker waited 2% of its window on
    the loader and lost 17% to its one epoch start (persistent_workers=True confirmed 1.18x,
    95% CI 1.14-1.21x, 2026-11-27). The step that begins the window has no duration of its
    own here: its wait counts."""
    n = len(loop.marks)
    starts: set[int] = set()
    for i in loop.epoch_start_steps:
        starts.update(range(i, min(i + loop.refill_steps, n)))
    if not starts:
        return 0.0
    # step_ms[j - 1] is step j's: from step j - 1's end to its own, its wait for data included
    durations = {j: step_ms[j - 1] for j in range(1, min(n, len(step_ms) + 1))}
    steady = [d for j, d in durations.items() if j not in starts] or list(durations.values())
    ref = statistics.median(steady) if steady else 0.0
    excess = sum(max(0.0, durations[j] - ref) for j in starts if j in durations)
    if 0 in starts:
        excess += loop.data_wait_ms[0]
    return max(excess, loop.epoch_start_s * 1e3)


def count_tokens(result: WindowResult, loop: Loop) -> None:
    """The window's tokens: real and computed, real tokens/s and the padding share (of the
    tokens computed, and per batch). A rank counts its own batches and states the run's rate
    as its own times the ranks; measure/ranks.py sums the ranks' exact counts."""
    result.unit, result.length_groups = loop.unit, dict(loop.length_groups)
    if loop.unit != TOKENS or not loop.tokens:
        return
    real = sum(r for r, _ in loop.tokens)
    computed = sum(c for _, c in loop.tokens)
    result.tokens, result.tokens_computed = real, computed
    result.tokens_per_sec = real * distributed.world_size() / loop.elapsed_s
    result.padding_share = 1 - real / computed if computed else 0.0
    shares = [1 - r / c if c else 0.0 for r, c in loop.tokens]
    result.padding_batches = {"mean": sum(shares) / len(shares), "max": max(shares)}


def report_chunks(clock: Clock, edges: list[tuple[Any, int]], progress: Progress,
                   units: list[float]) -> bool:
    """For every chunk edge the device has reached, add the window's throughput so far (from
    its start to that edge, in the window's unit: ``units`` per step) to the heartbeat: what
    the pruner reads. Return whether there was one. Never waits for the device. Cumulative, so that one slow chunk late in a good
    trial (another process took the cores for a moment) does not condemn it, while a trial
    that is slow from the start is caught at its first edge."""
    new = False
    start = edges[0][0]
    while len(progress.chunks) < len(edges) - 1:
        edge, steps = edges[len(progress.chunks) + 1]
        if not clock.done(edge):
            break
        progress.chunks.append(sum(units[:steps]) / (clock.ms(start, edge) / 1e3))
        new = True
    return new


