"""CHILD side: one trial's measured training window, run in a fresh subprocess.

    python -m autotune.window request.json result.json

Read top to bottom: build the workload with the trial's knobs, warm up (compile, cuDNN
autotuning, allocator growth and worker start-up happen here and are not measured), run the
measured window with the device synchronized at its edges, optionally a short profiler capture,
then write a WindowResult. Failures are outcomes written to the result, not exceptions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
import torch

from autotune.result import WindowResult
from autotune.training import CaptureFailed, Training, phase
from autotune.workload import Workload, build_workload

OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
               "std::bad_alloc", "DefaultCPUAllocator: can't allocate memory")


class NonFiniteLoss(RuntimeError):
    pass


class Progress:
    """Heartbeat for the runner's watchdog: steps done, written atomically at most ~4x/s."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.last = 0.0
        self.chunks: list[float] = []
        self.ceilings: dict[str, float] = {}
        # A ceiling still being measured: {"kind": "loader", "rate": samples/s, "batches": n}.
        self.partial: dict[str, Any] = {}
        self.peak_rss = 0

    def beat(self, stage: str, step: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.path is None or (not force and now - self.last < 0.25):
            return
        self.last = now
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(
            {"stage": stage, "step": step, "chunks": self.chunks, "ceilings": self.ceilings,
             "partial": self.partial}
        ))
        os.replace(tmp, self.path)


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


class Clock:
    """Marks on the device's timeline. On CUDA: events (no sync per step, so copies and
    compute keep overlapping); elapsed times are read after the closing synchronize. On CPU
    work is synchronous, so the host clock is the device clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def ms(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3

    def done(self, mark: Any) -> bool:
        """Has the device reached this mark? Never waits (cudaEventQuery)."""
        return bool(mark.query()) if self.cuda else True

    def sync(self, device: torch.device) -> None:
        if self.cuda:
            torch.cuda.synchronize(device)


def _batches(run: Training):
    """Endless batches: a new epoch (and, without persistent workers, new worker processes)
    starts when the loader runs out; that cost is part of the configuration's speed."""
    while True:
        yielded = False
        for batch in run.loader:
            yielded = True
            yield batch
        if not yielded:
            raise RuntimeError(
                "the loader yielded no batch: dataset smaller than batch_size with drop_last"
            )


def _check_finite(loss: torch.Tensor, where: str) -> float:
    value = float(loss.float().item())  # a sync point: only at window edges
    if not math.isfinite(value):
        raise NonFiniteLoss(f"loss is {value} after {where}")
    return value


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def measure(req: dict[str, Any], result: WindowResult, progress: Progress,
            compile_watch: CompileWatch) -> None:
    device = torch.device(req["device"])
    win = req["window"]
    workload: Workload = build_workload(req["workload"])
    if req.get("cpu_sized"):
        workload = workload.cpu_sized()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    run = Training(workload, req["knobs"], device, seed=req.get("seed", 0))
    batches = _batches(run)
    clock = Clock(device)
    batch_size = int(req["knobs"]["batch_size"])
    wanted = req.get("ceilings") or {}

    # The input-pipeline ceiling first: if the loader alone cannot beat the best trial, the
    # driver prunes this trial before any warm-up is spent on it.
    if wanted.get("loader"):
        result.ceilings["loader"] = loader_ceiling(batches, batch_size, win, progress)
        progress.partial = {}
        progress.ceilings = dict(result.ceilings)
        progress.beat("ceiling", 0, force=True)

    # Warm-up: first step alone (compile, cuDNN autotune, worker start-up), then the rest.
    # The "compile" stage tells the watchdog that a long silence now is a compiler at work.
    progress.beat("compile", 0, force=True)
    t0 = time.perf_counter()
    loss = run.step(*run.to_device(*next(batches)))
    clock.sync(device)
    first_step_s = time.perf_counter() - t0
    progress.beat("warmup", 1, force=True)
    for i in range(1, win["warmup_steps"]):
        loss = run.step(*run.to_device(*next(batches)))
        progress.beat("warmup", i + 1)
    clock.sync(device)
    result.warmup_s = time.perf_counter() - t0
    _check_finite(loss, "warm-up")

    # Measured window. Host clock for the wait on the loader (a host-side stall); device marks
    # for copy, forward+backward and optimizer; only the window's edges are synchronized, so
    # the device keeps its queue (and copies their overlap) all through it.
    max_steps, min_steps = win["measure_steps"], win["min_measure_steps"]
    min_seconds = float(win.get("min_measure_seconds", 0.0))
    # Chunk edges are where the pruner looks: the first one decides whether a trial is far below
    # the best, which a few steps show as well as many (1/8 of the window: 2 steps on CPU, 5
    # on CUDA); never a single step, which one stall on a shared machine can halve, and never
    # shorter than 1/8 of the minimum window (two 6 ms steps of a 16-worker loader read 415
    # samples/s where the trial ran at 1,250: a false prune).
    chunk = min(max_steps, max(2, max_steps // 8))
    chunk_s = min_seconds / 8
    data_wait_ms: list[float] = []
    marks: list[tuple[Any, Any, Any, Any]] = []
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    data_cpu_s, workers_cpu0 = 0.0, workers_cpu_s()
    start = time.perf_counter()
    edges = [(clock.mark(), 0)]  # chunk edges on the device's timeline: (mark, steps so far)
    edge_t = start
    while True:  # ends at a chunk edge: enough steps for long enough, or out of time
        w0, c0 = time.perf_counter(), time.thread_time()
        with phase("data"):
            inputs, targets = next(batches)
        data_wait_ms.append((time.perf_counter() - w0) * 1e3)
        data_cpu_s += time.thread_time() - c0  # loading in this process (num_workers=0)
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
        marks.append((m0, m1, m2, m3))
        now = time.perf_counter()
        at_edge = len(marks) - edges[-1][1] >= chunk and now - edge_t >= chunk_s
        if at_edge:
            edges.append((m3, len(marks)))
            edge_t = now
        progress.beat("measure", len(marks), force=_report_chunks(clock, edges, progress, batch_size))
        if at_edge:
            if len(marks) >= min_steps and now - start > win["measure_seconds"]:
                break
            if len(marks) >= max_steps:
                if now - start >= min_seconds:
                    break
                chunk = max_steps  # past the nominal window: fewer, longer chunks
    clock.sync(device)
    elapsed = time.perf_counter() - start
    _report_chunks(clock, edges, progress, batch_size)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    workers = int(req["knobs"]["num_workers"])
    loader_cpu = _loader_cpu_share(workers, data_cpu_s, sum(data_wait_ms) / 1e3,
                                   workers_cpu_s() - workers_cpu0, elapsed)
    result.final_loss = _check_finite(loss, "the measured window")

    n = len(marks)
    step_ms = [clock.ms(marks[i - 1][3], marks[i][3]) for i in range(1, n)] or [elapsed * 1e3]
    copy = sum(clock.ms(m[0], m[1]) for m in marks)
    compute = sum(clock.ms(m[1], m[2]) for m in marks)
    optim = sum(clock.ms(m[2], m[3]) for m in marks)
    total_ms = elapsed * 1e3
    result.steps, result.samples, result.measure_s = n, n * batch_size, elapsed
    result.samples_per_sec = n * batch_size / elapsed
    result.chunks = list(progress.chunks)
    result.step_ms = {
        "median": statistics.median(step_ms),
        "p10": _percentile(step_ms, 0.1),
        "p90": _percentile(step_ms, 0.9),
        "mean": total_ms / n,
    }
    result.timers = {
        "data_wait": sum(data_wait_ms) / total_ms,
        "h2d": copy / total_ms,
        "compute": compute / total_ms,
        "optimizer": optim / total_ms,
        "step_ms": total_ms / n,
        # Pages the training process faulted in per step (freshly mapped memory, zeroed by
        # the kernel): the symptom of an allocator that unmaps what the step frees.
        "page_faults_per_step": faults / n,
        # The share of the loader's time its processes spent on a CPU: near 1, loading is
        # computation (decode, augment) and workers beyond the cores cannot help; near 0, it
        # waits (storage, network, a sleep) and more workers than cores can.
        "loader_cpu_share": loader_cpu,
    }
    result.compile_s = max(0.0, first_step_s - result.step_ms["median"] / 1e3)

    progress.peak_rss = peak_rss_bytes()  # while the DataLoader workers are still alive
    if wanted.get("compute"):
        result.ceilings["compute"] = compute_ceiling(run, batches, batch_size, win, clock)

    if win.get("profile") and req.get("trace_path"):
        from autotune.profiling import capture

        result.trace = capture(run, batches, win.get("profile_steps", 3), req["trace_path"])
    result.outcome = "ok"
    if compile_watch.hits:
        result.outcome = "compile_fallback"
        result.error = f"{compile_watch.hits[0]}: torch.compile fell back to eager"


def workers_cpu_s() -> float:
    """CPU seconds used so far by this process's children (its DataLoader workers): the
    kernel's total for those already exited and reaped (workers respawned at an epoch start),
    /proc for the live ones. Differences of two readings are the workers' CPU in between."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return total
    for child in children:
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # exited between the listing and the read
            pass
    return total


def _loader_cpu_share(workers: int, in_process_cpu_s: float, wait_s: float,
                      workers_cpu: float, elapsed_s: float) -> float | None:
    """CPU time of the loading over its wall time: the training process's own while it waited
    for a batch (num_workers=0), or the workers' over the whole window (num_workers > 0; it
    means something while the step waits on them, i.e. when they never get ahead)."""
    if workers == 0:
        return min(1.0, in_process_cpu_s / wait_s) if wait_s > 0 else None
    return min(1.0, workers_cpu / (workers * elapsed_s)) if elapsed_s > 0 else None


def _report_chunks(clock: Clock, edges: list[tuple[Any, int]], progress: Progress,
                   batch_size: int) -> bool:
    """For every chunk edge the device has reached, add the window's throughput so far (from
    its start to that edge) to the heartbeat: what the pruner reads. Return whether there was
    one. Never waits for the device. Cumulative, so that one slow chunk late in a good
    trial (another process took the cores for a moment) does not condemn it, while a trial
    that is slow from the start is caught at its first edge."""
    new = False
    start = edges[0][0]
    while len(progress.chunks) < len(edges) - 1:
        edge, steps = edges[len(progress.chunks) + 1]
        if not clock.done(edge):
            break
        progress.chunks.append(steps * batch_size / (clock.ms(start, edge) / 1e3))
        new = True
    return new


def loader_ceiling(batches: Any, batch_size: int, win: dict[str, Any],
                   progress: Progress | None = None) -> float:
    """Seed 003's mock trainer: the loader alone, every batch discarded. Samples/sec the input
    pipeline can deliver at best (after its first batch, which includes worker start-up).

    The rate so far goes out with every heartbeat, so the driver can stop a loader that is
    already far too slow without waiting for the whole measurement."""
    next(batches)
    n, start = 0, time.perf_counter()
    while n < win["measure_steps"] and (n < 2 or time.perf_counter() - start < win["measure_seconds"] / 2):
        next(batches)
        n += 1
        if progress is not None:
            rate = n * batch_size / (time.perf_counter() - start)
            progress.partial = {"kind": "loader", "rate": rate, "batches": n}
            progress.beat("ceiling", n)
    return n * batch_size / (time.perf_counter() - start)


def compute_ceiling(run: Training, batches: Any, batch_size: int, win: dict[str, Any],
                    clock: Clock) -> float:
    """Seed 003's mock loader: one batch kept on the device, the step alone. Samples/sec the
    model can train at with a free input pipeline."""
    inputs, targets = run.to_device(*next(batches))  # the model is warm: no extra warm-up
    clock.sync(run.device)
    n, start = 0, time.perf_counter()
    while n < win["measure_steps"] and (n < 2 or time.perf_counter() - start < win["measure_seconds"] / 2):
        run.step(inputs, targets)  # no sync inside: measure_steps bounds the queued work
        n += 1
    clock.sync(run.device)
    return n * batch_size / (time.perf_counter() - start)


class CompileWatch(logging.Handler):
    """torch.compile that hits its recompile limit logs one warning and silently runs eager
    from then on; the measured figure is then not the compiled one, so the trial is flagged."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("torch._dynamo hit config."):
            self.hits.append(message.splitlines()[0])

    def __enter__(self) -> CompileWatch:
        logging.getLogger("torch._dynamo").addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        logging.getLogger("torch._dynamo").removeHandler(self)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return any(m in text for m in OOM_MARKERS)


def _cuda_peak_gb(device: torch.device) -> float:
    """The allocator's peak reservation; 0 if CUDA never started (or failed to): asking would
    start it now, or raise again, and lose the result that says why the trial ended."""
    try:
        if torch.cuda.is_initialized():
            return torch.cuda.max_memory_reserved(device) / 2**30
    except Exception:  # noqa: BLE001 - a broken context: the outcome already says so
        pass
    return 0.0


def main(request_path: str, result_path: str) -> int:
    req = json.loads(Path(request_path).read_text())
    result = WindowResult()
    progress = Progress(req.get("progress_path"))
    device = torch.device(req["device"])
    with CompileWatch() as compile_watch:
        try:
            measure(req, result, progress, compile_watch)
        except NonFiniteLoss as exc:
            result.outcome, result.error = "nan", str(exc)
        except CaptureFailed as exc:
            result.outcome, result.error = "capture_failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded outcome
            result.outcome = "oom" if is_oom(exc) else "crash"
            result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            traceback.print_exc()
    if device.type == "cuda":
        result.peak_memory_gb = _cuda_peak_gb(device)
    else:
        result.peak_memory_gb = max(progress.peak_rss, peak_rss_bytes()) / 2**30
    tmp = Path(result_path + ".tmp")
    tmp.write_text(result.to_json())
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
