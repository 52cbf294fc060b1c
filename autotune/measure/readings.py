"""What a trial's process reads about itself (CHILD side): the heartbeat it writes for the
runner's watchdog and pruner, its memory (with its DataLoader workers') from /proc, and its
workers' CPU time."""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from autotune.core.files import atomic_write


class Progress:
    """Heartbeat for the runner's watchdog: steps done, written atomically at most ~4x/s.

    The file is written by a thread of its own, not by the measured loop: under disk load
    (``stress-ng --hdd 2``) each write took tens of milliseconds, and a window of 5 ms steps
    that wrote its heartbeat inline spent 12-14% of its time between steps on it (its phases
    summed to 0.86-0.88 of the step, against 0.95-0.96 beside a CPU load; 2026-11-29)."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.last = 0.0
        self._latest: str | None = None  # the newest beat not yet written
        self._wake = threading.Condition()
        self._writer: threading.Thread | None = None
        self.chunks: list[float] = []
        self.ceilings: dict[str, float] = {}
        self.ceiling_noise: dict[str, float] = {}
        # A ceiling still being measured: {"kind": "loader", "rate": samples/s, "batches": n}.
        self.partial: dict[str, Any] = {}
        self.peak_rss = 0
        self.peak_device_gb: float | None = None  # CUDA: the allocator's, at the window's end
        self.compile_s: float | None = None  # the first step's seconds, once it is done
        # The machine was contended since the window began (measure/contention.py): the
        # driver does not prune on chunks read then.
        self.contended = False
        # Workers were started anew at an epoch start in the window, fewer steps ago than an
        # epoch has (measure/loop.py): the chunks so far weigh that start more than a run
        # does, and the driver does not prune on them.
        self.restarting = False

    def beat(self, stage: str, step: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.path is None or (not force and now - self.last < 0.25):
            return
        self.last = now
        payload = json.dumps(
            {"stage": stage, "step": step, "chunks": self.chunks, "ceilings": self.ceilings,
             "ceiling_noise": self.ceiling_noise, "partial": self.partial,
             "compile_s": self.compile_s, "contended": self.contended,
             "restarting": self.restarting})
        with self._wake:
            self._latest = payload  # a beat not yet written is replaced by the newer one
            self._wake.notify()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_beats, name="autotune-heartbeat",
                                            daemon=True)
            self._writer.start()

    def _write_beats(self) -> None:
        assert self.path is not None
        while True:
            with self._wake:
                while self._latest is None:
                    self._wake.wait()
                payload, self._latest = self._latest, None
            atomic_write(self.path, payload, durable=False)


def peak_rss_bytes() -> int:
    """Memory of the trial and its DataLoader workers, read from /proc at the window's edges
    (nothing samples during the window). The proportional set sizes (Pss) of all of them add
    up without counting pages shared after fork twice; the kernel's high-water mark of this
    process (VmHWM - VmRSS) adds how far it was above its current size at its peak."""
    me = os.getpid()
    hwm, rss = _proc_field(me, "status", "VmHWM:"), _proc_field(me, "status", "VmRSS:")
    total = _proc_field(me, "smaps_rollup", "Pss:") + max(0, hwm - rss)
    if not total:  # not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        for child in psutil.Process().children(recursive=True):
            total += _proc_field(child.pid, "smaps_rollup", "Pss:")
    except psutil.Error:
        pass
    return total


def _proc_field(pid: int, name: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _schedstat_s(path: str) -> tuple[float, float] | None:
    """Seconds a task ran on a CPU and waited runnable for one (the kernel's runqueue wait),
    from a /proc schedstat file; None where there is none (not Linux, a task gone)."""
    try:
        with open(path) as f:
            fields = f.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def thread_busy_s() -> float:
    """CPU demand of this thread so far: time on a CPU plus time runnable but waiting for one.
    On a busy machine a thread that computes waits for a core; counting only its CPU time
    would read it as waiting on I/O. A sleep is not runqueue wait, so a loader that sleeps
    still reads as idle. Falls back to CPU time where schedstat is missing."""
    read = _schedstat_s("/proc/thread-self/schedstat")
    return sum(read) if read else time.thread_time()


def thread_cpu_wait_s() -> float:
    """Seconds this thread has been runnable but waiting for a CPU (0 where schedstat is
    missing): on a busy machine, time the OS gave other processes, which is neither this
    thread's work nor its waiting on I/O."""
    read = _schedstat_s("/proc/thread-self/schedstat")
    return read[1] if read else 0.0


def workers_cpu_s() -> float:
    """CPU demand so far of this process's children (its DataLoader workers), in seconds: for
    the live ones, every thread's time on a CPU plus its runqueue wait (schedstat: a worker
    that computes on a busy machine waits for a core, which is demand, not I/O); for those
    already exited and reaped (workers respawned at an epoch start) the kernel's CPU total.
    Differences of two readings are the workers' demand in between."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return total
    for child in children:
        total += _process_busy_s(child)
    return total


def _process_busy_s(child: psutil.Process) -> float:
    """One live child's CPU time plus runqueue wait, summed over its threads (psutil's CPU
    times where schedstat cannot be read)."""
    busy, found = 0.0, False
    try:
        tasks = os.listdir(f"/proc/{child.pid}/task")
    except OSError:
        tasks = []
    for tid in tasks:
        read = _schedstat_s(f"/proc/{child.pid}/task/{tid}/schedstat")
        if read:
            busy, found = busy + sum(read), True
    if found:
        return busy
    try:
        t = child.cpu_times()
        return t.user + t.system
    except psutil.Error:  # exited between the listing and the read
        return 0.0


def loader_cpu_share(workers: int, in_process_cpu_s: float, wait_s: float,
                      workers_cpu: float, elapsed_s: float) -> float | None:
    """CPU demand (time on a CPU plus runqueue wait) of the loading over its wall time: the
    training process's own while it waited for a batch (num_workers=0), or the workers' over the whole window (num_workers > 0; it
    means something while the step waits on them, i.e. when they never get ahead)."""
    if workers == 0:
        return min(1.0, in_process_cpu_s / wait_s) if wait_s > 0 else None
    return min(1.0, workers_cpu / (workers * elapsed_s)) if elapsed_s > 0 else None


def receive_share(workers: int, busy_s: float, wait_s: float) -> float | None:
    """The training process's CPU demand over its waits for batches that workers loaded (None
    without workers, or without a wait worth a reading)."""
    if workers == 0 or wait_s <= 1e-3:
        return None
    return min(1.0, max(0.0, busy_s) / wait_s)
