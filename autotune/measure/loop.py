"""CHILD side: the measured loop of a trial's window, between its warm-up and its extras.

Each step is timed in two places. The host clock times the wait on the loader (a host-side
stall, ``_HostSide``); marks on the device's timeline time the copy, forward+backward and the
optimizer (``_timed_step``), so the device keeps its queue all through the window and only its
edges are synchronized. ``_Chunks`` owns where the pruner looks and when the window ends.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.core.batch import ShapeLog
from autotune.core.config import WindowConfig, sized
from autotune.core.training import Training, phase
from autotune.measure.batches import Batches, length_group_steps
from autotune.measure.clock import Clock
from autotune.measure.contention import Snapshot, between, snapshot
from autotune.measure.figures import Loop, report_chunks
from autotune.measure.readings import Progress, thread_busy_s, workers_cpu_s

Marks = tuple[Any, Any, Any, Any]


def measured_loop(run: Training, batches: Batches, clock: Clock, win: WindowConfig,
                  progress: Progress, batch_size: int, start_load: Snapshot,
                  agree: Callable[[list[int]], list[int]] | None = None) -> Loop:
    """The measured window. Host clock for the wait on the loader (a host-side stall); device
    marks for copy, forward+backward and optimizer; only the window's edges are synchronized,
    so the device keeps its queue (and copies their overlap) all through it.

    Chunk edges are where the pruner looks: the first one decides whether a trial is far below
    the best, which a few steps show as well as many (1/8 of the window: 2 steps on CPU, 5 on
    CUDA); never a single step, which one stall on a shared machine can halve, and never
    shorter than 1/8 of the minimum window (two 6 ms steps of a 16-worker loader read 415
    samples/s where the trial ran at 1,250: a false prune).

    Throughput is in the window's unit (measure/batches.Batches.units): real tokens where
    the batches carry them, so a window of short batches does not read fast. Under a
    length-grouped sampler the window also ends only where a length group (a mega-batch)
    closes, so it spans whole mega-batches: each is a uniform draw from the dataset, whose
    lengths are then the run's mix, not the tail of one sorted group.

    ``agree`` (ranks of one trial): every rank's wish to stop, at every chunk edge, made one
    decision (a rank that took one step more would wait forever on its all-reduce); edges are
    then counted in steps alone, the same on every rank, and the first edge sets how many
    steps make a chunk of at least the usual length (an edge every 2 steps, each with its
    /proc reads and a collective, cost a 15 ms step of 2 ranks on one core each a third of its
    speed)."""
    host = _HostSide()
    group = length_group_steps(run.loader)
    marks: list[Marks] = []
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    workers_cpu0 = workers_cpu_s()
    epochs0, epoch_s0 = batches.epochs, batches.epoch_start_s
    chunks = _Chunks(win, clock, agree)
    epoch_steps = _epoch_steps(run)
    while True:  # ends at a chunk edge: enough steps for long enough, or out of time
        loss, step_marks = _timed_step(run, clock, *host.next_batch(batches, batch_size))
        marks.append(step_marks)
        now = time.perf_counter()
        at_edge = chunks.at_edge(len(marks), now, step_marks[3])
        if at_edge:
            # The load so far (a few /proc reads per edge): a chunk read while other processes
            # held the cores must not prune the trial (search/loop/driver.py reads the heartbeat).
            progress.contended = between(start_load, snapshot())["contended"]
            progress.restarting = bool(host.epoch_start_steps) and len(marks) < epoch_steps
        progress.beat("measure", len(marks),
                      force=report_chunks(clock, chunks.edges, progress, host.units))
        if at_edge:
            chunks.decide(len(marks), now)
        if chunks.finishing and batches.closed_group(group) and len(marks) >= group \
                and run.at_cycle_edge:  # whole accumulation cycles (window._to_edges)
            break
    clock.sync(run.device)
    elapsed = time.perf_counter() - chunks.start
    report_chunks(clock, chunks.edges, progress, host.units)
    return Loop(loss, marks, host.data_wait_ms, elapsed,
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0,
                host.data_cpu_s, workers_cpu_s() - workers_cpu0, batches.epochs - epochs0,
                batches.epoch_start_s - epoch_s0, host.shapes.summary(), host.units,
                host.tokens, batches.unit or "samples/s",
                {"group_steps": group, "groups": len(marks) // group} if group > 1 else {},
                epoch_start_steps=host.epoch_start_steps, refill_steps=refill_steps(run.knobs),
                epoch_start_cpu_s=host.epoch_start_cpu_s)


def _epoch_steps(run: Training) -> int:
    """An epoch's steps where each epoch starts its workers anew (0 otherwise, or where the
    loader has no length): a chunk read less than that after such a start weighs it more than a
    run does. The README's ResNet-18 at batch 64 with one worker, its window begun at an
    epoch's start, read 166 samples/s over its first chunk and 470 over a window without one
    (2026-11-27), though a run pays that start once in 32 steps; a README study had pruned a
    trial of those knobs on its first chunk at 164.6."""
    if not int(run.knobs.get("num_workers") or 0) or run.knobs.get("persistent_workers"):
        return 0
    try:
        return len(run.loader)
    except TypeError:  # an iterable dataset's loader
        return 0


def refill_steps(knobs: dict[str, Any]) -> int:
    """The steps over which an epoch's new workers fill their prefetch buffer (num_workers x
    prefetch_factor batches): where, on a machine with few cores, their start-up competes with
    the step. 1 for a main-process loader, which starts nothing."""
    workers = int(knobs.get("num_workers") or 0)
    return max(1, workers * int(knobs.get("prefetch_factor") or 2)) if workers else 1


@dataclass
class _HostSide:
    """Each step's batch as the host waited for it: the wait, the CPU this thread spent in it
    (a main-process loader computes there, num_workers=0), the batch's units and real tokens,
    and its shapes (whether they vary is measured, not assumed)."""

    data_wait_ms: list[float] = field(default_factory=list)
    units: list[float] = field(default_factory=list)
    tokens: list[tuple[int, int]] = field(default_factory=list)
    shapes: ShapeLog = field(default_factory=ShapeLog)
    data_cpu_s: float = 0.0
    epoch_start_cpu_s: float = 0.0  # the part of data_cpu_s spent in epoch-starting waits
    epoch_start_steps: list[int] = field(default_factory=list)  # steps that began an epoch

    def next_batch(self, batches: Batches, batch_size: int) -> tuple[Any, Any]:
        w0, c0, epochs = time.perf_counter(), thread_busy_s(), batches.epochs
        with phase("data"):
            inputs, targets = next(batches)
        self.data_wait_ms.append((time.perf_counter() - w0) * 1e3)
        busy = thread_busy_s() - c0
        if batches.epochs != epochs:
            self.epoch_start_steps.append(len(self.data_wait_ms) - 1)
            self.epoch_start_cpu_s += busy
        self.units.append(batches.units(batch_size))
        if batches.last_tokens is not None:
            self.tokens.append(batches.last_tokens)
        self.shapes.add(inputs)
        self.data_cpu_s += busy
        return inputs, targets


def _timed_step(run: Training, clock: Clock, inputs: Any, targets: Any) -> tuple[torch.Tensor, Marks]:
    """One step and its four marks on the device's timeline: copy start, copy end,
    forward+backward end, optimizer end. A captured graph replays the whole step at once, so
    its three phases end at one mark."""
    m0 = clock.mark()
    inputs, targets = run.to_device(inputs, targets)
    m1 = clock.mark()
    if run.graph is not None:
        loss = run.step(inputs, targets)
        m2 = m3 = clock.mark()
    else:
        loss = run.forward_backward(inputs, targets)
        m2 = clock.mark()
        run.optimizer_step()
        m3 = clock.mark()
    return loss, (m0, m1, m2, m3)


class _Chunks:
    """The window's chunk edges (where the pruner looks) and its end, decided only at an edge.

    A chunk is at least ``chunk`` steps and ``chunk_s`` seconds. Ranks of one trial count
    edges in steps alone (``agree``), the same on every rank, and agree at each edge on
    whether to stop and how many steps make a chunk of the usual length."""

    def __init__(self, win: WindowConfig, clock: Clock,
                 agree: Callable[[list[int]], list[int]] | None):
        self.max_steps, self.min_steps = sized(win.measure_steps), sized(win.min_measure_steps)
        self.min_seconds = win.min_measure_seconds
        self.measure_seconds = sized(win.measure_seconds)
        self.chunk = min(self.max_steps, max(2, self.max_steps // 8))
        self.long_enough = self.min_seconds / 8  # a chunk's length in seconds
        self.chunk_s = 0.0 if agree is not None else self.long_enough
        self.agree = agree
        self.finishing = False
        self.start = time.perf_counter()
        self.edge_t = self.start
        self.edges = [(clock.mark(), 0)]  # on the device's timeline: (mark, steps so far)

    def at_edge(self, steps: int, now: float, mark: Any) -> bool:
        """Whether this step closes a chunk (then recorded as an edge)."""
        if steps - self.edges[-1][1] < self.chunk or now - self.edge_t < self.chunk_s:
            return False
        self.edges.append((mark, steps))
        self.edge_t = now
        return True

    def decide(self, steps: int, now: float) -> None:
        """At an edge: enough steps for long enough, or past the window's time. Past the
        nominal window's steps, fewer and longer chunks."""
        if self.finishing:
            return
        ran = now - self.start
        stop = (steps >= self.min_steps and ran > self.measure_seconds) or \
            (steps >= self.max_steps and ran >= self.min_seconds)
        if self.agree is not None:
            per_step = ran / steps
            wanted = math.ceil(self.long_enough / per_step) if per_step > 0 else self.chunk
            decided = self.agree([int(stop), min(self.max_steps, wanted)])
            stop, self.chunk = bool(decided[0]), max(self.chunk, decided[1])
        self.finishing = stop
        if not stop and steps >= self.max_steps:
            self.chunk = self.max_steps
