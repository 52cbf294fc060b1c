"""CHILD side: one trial's measured training window, run in a fresh subprocess.

    python -m autotune.measure.window request.json result.json

Read top to bottom: build the workload with the trial's knobs, warm up (compile, cuDNN
autotuning, allocator growth and worker start-up happen here and are not measured), run the
measured window with the device synchronized at its edges, optionally a short profiler capture,
then write a WindowResult. Failures are outcomes written to the result, not exceptions.
"""

from __future__ import annotations

import logging
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from autotune.core import distributed
from autotune.core.config import WindowConfig, sized
from autotune.core.files import atomic_write
from autotune.core.training import CaptureFailed, Training, input_dataset
from autotune.core.workload import Workload, build_workload
from autotune.diagnose.thresholds import DATA_WAIT_NOTABLE
from autotune.measure import comm
from autotune.measure.batches import Batches, length_group_steps
from autotune.measure.ceilings import compute_ceiling, loader_ceiling
from autotune.measure.clock import Clock
from autotune.measure.contention import Snapshot, between, snapshot
from autotune.measure.figures import summarize, window_spread
from autotune.measure.loader_profile import profile_loader
from autotune.measure.loop import measured_loop
from autotune.measure.losses import record_losses
from autotune.measure.nvml import GpuReader
from autotune.measure.profiling import capture
from autotune.measure.protocol import TrialRequest, WindowResult, mentions_oom
from autotune.measure.readings import Progress, peak_rss_bytes


class NonFiniteLoss(RuntimeError):
    pass


def _check_finite(loss: torch.Tensor, where: str) -> float:
    value = float(loss.float().item())  # a sync point: only at window edges
    if not math.isfinite(value):
        raise NonFiniteLoss(f"loss is {value} after {where}")
    return value


def measure(req: TrialRequest, result: WindowResult, progress: Progress,
            compile_watch: CompileWatch) -> None:
    """The whole window, in the order it runs: build, loader ceiling, warm-up, measured loop,
    summary, compute ceiling, profiler capture."""
    device = torch.device(req.device)
    win = req.window
    workload: Workload = build_workload(req.workload)
    if req.cpu_sized:
        workload = workload.cpu_sized()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    run = Training(workload, req.knobs, device, seed=req.seed, grad_accum=req.grad_accum)
    result.optimizer = type(run.optimizer).__name__
    batches = Batches(run)
    clock = Clock(device)
    # Samples per step of the whole run: every rank steps together, each on its own batch.
    ranks = distributed.world_size()
    batch_size = int(req.knobs["batch_size"]) * ranks
    workers = int(req.knobs["num_workers"])
    wanted = req.ceilings
    gpu = GpuReader(device.index or 0) if device.type == "cuda" else None
    trial_start = snapshot()

    # The input-pipeline ceiling comes before the first step, i.e. before torch.compile runs
    # (compilation is lazy: it happens inside the first step): if the loader alone cannot beat
    # the best trial, the driver prunes this trial before any compile or warm-up is spent on it.
    extras_start = time.perf_counter()
    if wanted.get("loader"):
        _loader_ceiling(batches, batch_size, workers, win, progress, result, trial_start)
    result.extras_s = time.perf_counter() - extras_start

    first_step_s, loss = warm_up(run, batches, clock, win, progress, result)
    _check_finite(loss, "warm-up")

    agree = comm.agree if ranks > 1 else None
    if agree is not None:
        comm.barrier()  # the ranks' windows start together
    window_start = snapshot(gpu)
    loop = measured_loop(run, batches, clock, win, progress, batch_size, window_start, agree)
    result.contention = between(window_start, snapshot(gpu))
    result.final_loss = _check_finite(loop.loss, "the measured window")
    summarize(result, loop, clock, progress, batch_size, workers)
    result.compile_s = max(0.0, first_step_s - result.step_ms["median"] / 1e3)

    # The window's peak, read before what follows it (the ranks' communication
    # counterfactual gathers a sharded model's every parameter: not the run's memory).
    progress.peak_rss = peak_rss_bytes()  # while the DataLoader workers are still alive
    progress.peak_device_gb = _cuda_peak_gb(device) if device.type == "cuda" else None
    extras_start = time.perf_counter()
    _after_window(req, run, batches, clock, batch_size, progress, result)
    # A ceiling and the window are taken at different moments: on a loaded machine the trial's
    # share of the cores changes between them (a 0.5 ms mlp step waiting 100 ms for a core now
    # and then: intra-op threads as many as the cores, each op waiting for its partner thread
    # to get a core), so the window states its own noise too (pruning.ceiling_violations).
    result.ceiling_noise["window"] = window_spread(loop, clock, batch_size)
    _evidence(req, workload, run, batches, progress, result)
    result.extras_s += time.perf_counter() - extras_start
    result.outcome = "ok"
    if compile_watch.hits:
        result.outcome = "compile_fallback"
        result.error = f"{compile_watch.hits[0]}: torch.compile fell back to eager"


def _loader_ceiling(batches: Batches, batch_size: int, workers: int, win: WindowConfig,
                    progress: Progress, result: WindowResult, trial_start: Snapshot) -> None:
    """The loader's own rate, handed to the driver's pruner by the heartbeat at once."""
    rate, noise = loader_ceiling(batches, batch_size, workers, win, progress)
    result.ceilings["loader"] = rate
    result.ceiling_noise["loader"] = noise
    progress.partial = {}
    progress.ceilings = dict(result.ceilings)
    progress.ceiling_noise = dict(result.ceiling_noise)
    progress.contended = between(trial_start, snapshot())["contended"]  # the pruner reads it
    progress.beat("ceiling", 0, force=True)


def _after_window(req: TrialRequest, run: Training, batches: Batches, clock: Clock,
                  batch_size: int, progress: Progress, result: WindowResult) -> None:
    """The measurements that follow the window: the ranks' exposed all-reduce and the step
    alone's compute ceiling."""
    win = req.window
    ranks = distributed.world_size()
    if ranks > 1 and req.comm:  # a confirmation or scaling window skips it
        progress.beat("comm", result.steps, force=True)
        result.comm = comm.exposed(run, batches, clock, result.step_ms["median"],
                                    sized(win.measure_seconds),
                                    beat=lambda n: progress.beat("comm", n, force=True))
    if req.ceilings.get("compute") and ranks == 1:  # its timed loop would not match across ranks
        beat = lambda step: progress.beat("ceiling", step)  # noqa: E731
        rate, noise = compute_ceiling(run, batches, batch_size, win, clock, beat)
        if result.rate > rate * (1 + max(noise, 0.1)):
            # Beaten (pruning.ceiling_violations): measured again before the driver reports
            # it. An upper bound may take the higher reading; their gap is noise too.
            again, noise2 = compute_ceiling(run, batches, batch_size, win, clock, beat)
            noise = max(noise, noise2, abs(again - rate) / max(again, rate))
            rate = max(rate, again)
        result.ceilings["compute"], result.ceiling_noise["compute"] = rate, noise


def _evidence(req: TrialRequest, workload: Workload, run: Training, batches: Batches,
              progress: Progress, result: WindowResult) -> None:
    """What the diagnosis reads beyond the figures: a profiler capture, and where the step
    waited on its data, a profile of the loader's own stages."""
    win = req.window
    if win.profile and req.trace_path:
        result.trace = capture(run, batches, sized(win.profile_steps), req.trace_path,
                               lambda step: progress.beat("profile", step, force=True))
    if req.loader_profile and (result.timers.get("data_wait") or 0.0) >= DATA_WAIT_NOTABLE:
        progress.beat("loader_profile", result.steps, force=True)
        result.loader_profile = profile_input(workload, req.knobs, int(req.knobs["batch_size"]),
                                              req.seed)


def profile_input(workload: Workload, knobs: dict[str, Any], batch_size: int,
                  seed: int) -> dict[str, Any]:
    """The loader's pipeline profiled in process, outside the measured window: only for a
    trial whose loop waited on its loader (DATA_WAIT_NOTABLE), so a compute-bound trial pays
    nothing. A failure is a note in the profile, never the trial's outcome."""
    dataset, collate = input_dataset(workload, knobs)
    split = int(knobs.get("transform_split", 0))
    stages = {s.host: (f"{s.name} (input stage)", "decode" if "decode" in s.name else "transform")
              for s in workload.stages()[:split]}
    try:
        return profile_loader(dataset, collate, batch_size, LOADER_PROFILE_BATCHES, seed, stages)
    except Exception as exc:  # noqa: BLE001 - evidence, not a gate
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def warm_up(run: Training, batches: Any, clock: Clock, win: WindowConfig, progress: Progress,
            result: WindowResult) -> tuple[float, torch.Tensor]:
    """First step alone (compile, cuDNN autotune, worker start-up), then the rest, then the
    batches the workers prefetched while the first step compiled. Returns the first step's
    seconds and the last loss. The "compile" stage tells the watchdog that a long silence now
    is a compiler at work; the heartbeat then carries the compile time, so a trial pruned
    later still has it recorded."""
    progress.beat("compile", 0, force=True)
    t0 = time.perf_counter()
    loss = run.step(*run.to_device(*next(batches)))
    clock.sync(run.device)
    first_step_s = time.perf_counter() - t0
    progress.compile_s = first_step_s
    if run.knobs.get("compile", "off") != "off":
        from torch._dynamo.utils import counters

        result.compile_cache = {"hits": int(counters["inductor"]["fxgraph_cache_hit"]),
                                "misses": int(counters["inductor"]["fxgraph_cache_miss"])}
    progress.beat("warmup", 1, force=True)
    # At least one whole accumulation cycle: its optimizer step (a first one allocates the
    # optimizer's state) is warm-up, not window.
    for i in range(1, max(sized(win.warmup_steps), run.grad_accum)):
        loss = run.step(*run.to_device(*next(batches)))
        progress.beat("warmup", i + 1)
    loss = _drain_prefetched(run, batches, win, progress) or loss
    loss = _to_edges(run, batches, progress) or loss
    clock.sync(run.device)
    result.warmup_s = time.perf_counter() - t0
    return first_step_s, loss


# A next() that returns faster than this took a batch the workers had already prefetched.
PREFETCHED_S = 1e-3
#: Batches in the loader profile's pass (measure/loader_profile.py).
LOADER_PROFILE_BATCHES = 8


def _drain_prefetched(run: Training, batches: Any, win: WindowConfig,
                      progress: Progress) -> torch.Tensor | None:
    """Step through the batches the workers buffered (num_workers x prefetch_factor) while the
    first step compiled, until one has to be waited for. A window that starts on a full buffer
    times that burst as throughput: a step faster than its loader then reads above the
    loader's own ceiling. A step slower than its loader never empties the buffer and does not
    need to: capped at the buffer's size and a quarter of the measuring time."""
    workers = int(run.knobs["num_workers"])
    if workers == 0 or distributed.world_size() > 1:  # ranks must take the same steps
        return None
    buffered = workers * int(run.knobs["prefetch_factor"] or 2)
    loss, deadline = None, time.perf_counter() + sized(win.measure_seconds) / 4
    for _ in range(buffered):
        w0 = time.perf_counter()
        inputs, targets = next(batches)
        waited = time.perf_counter() - w0
        loss = run.step(*run.to_device(inputs, targets))
        progress.beat("warmup", 0)
        if waited > PREFETCHED_S or time.perf_counter() > deadline:
            break
    return loss


def _to_edges(run: Training, batches: Batches, progress: Progress) -> torch.Tensor | None:
    """Warm-up steps on to where a length group and an accumulation cycle both start, so that
    the window begins with a whole mega-batch (a length-grouped sampler sorts each one
    longest first, so a window that began mid-way would see only its shorter batches) and a
    whole cycle (k micro-batches, then the optimizer's step: a window that began or ended
    mid-cycle would count the optimizer's step too seldom or too often)."""
    group, loss = length_group_steps(run.loader), None
    while not (batches.closed_group(group) and run.at_cycle_edge):
        loss = run.step(*run.to_device(*next(batches)))
        progress.beat("warmup", 0)
    return loss


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
    return mentions_oom(str(exc))


def _cuda_peak_gb(device: torch.device) -> float:
    """The allocator's peak reservation; 0 if CUDA never started (or failed to): asking would
    start it now, or raise again, and lose the result that says why the trial ended."""
    try:
        if torch.cuda.is_initialized():
            return torch.cuda.max_memory_reserved(device) / 2**30
    except Exception:  # noqa: BLE001 - a broken context: the outcome already says so
        pass
    return 0.0


def _peak_gb(device: torch.device, progress: Progress, result: WindowResult) -> float:
    """The trial's peak memory: through its measured window where it measured one (read at
    the window's end), else the process's own to its end (a failure's, an OOM's). On CUDA the
    caching allocator's peak reservation; on the CPU the process's and its loader workers'
    resident memory (readings.peak_rss_bytes), what the kernel and its OOM killer count."""
    measured = result.outcome in ("ok", "compile_fallback")
    if device.type == "cuda":
        return (progress.peak_device_gb if measured and progress.peak_device_gb is not None
                else _cuda_peak_gb(device))
    if measured and progress.peak_rss:
        return progress.peak_rss / 2**30
    return max(progress.peak_rss, peak_rss_bytes()) / 2**30


def main(request_path: str, result_path: str) -> int:
    """A trial of one process (measure/entry.py chooses between this and launched ranks)."""
    return run(TrialRequest.read(Path(request_path)), Path(result_path))


def run(req: TrialRequest, result_path: Path) -> int:
    """One process's window (or numerics run) and its result file: a trial's, or one rank's."""
    result = WindowResult()
    progress = Progress(req.progress_path)
    device = torch.device(req.device)
    with CompileWatch() as compile_watch:
        try:
            if req.numerics_steps:
                record_losses(req, result, progress)
            else:
                measure(req, result, progress, compile_watch)
        except NonFiniteLoss as exc:
            result.outcome, result.error = "nan", str(exc)
        except CaptureFailed as exc:
            result.outcome, result.error = "capture_failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a recorded outcome
            result.outcome = "oom" if is_oom(exc) else "crash"
            result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            traceback.print_exc()
    result.peak_memory_gb = _peak_gb(device, progress, result)
    atomic_write(result_path, result.to_json(), durable=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
