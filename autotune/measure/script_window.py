"""CHILD side: the window of a trial that is the user's own script (measure/script_trial.py
runs it in the trial's process).

The script's loop, not autotune's, takes the steps: each ``meter.step(n)`` of its
``autotune.Runtime`` meter reaches ``ScriptWindow.step`` with the samples of that step and the
time the loop waited for its batch (``meter.wrap(loader)`` or ``meter.wait()`` time it). The
window is the trial window's, counted in the script's steps: warm-up (the first step's
seconds are its compile/start-up cost), then measured steps in chunks whose cumulative rate
the pruner reads from the heartbeat, the device synchronized at the window's two edges, the
machine's load read over it; then the same ``WindowResult`` a workload's trial writes, and the
process ends there: the script's evaluation, checkpointing and saving never run in a trial.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from autotune.core.config import sized
from autotune.core.files import atomic_write
from autotune.measure.clock import Clock
from autotune.measure.contention import Snapshot, between, snapshot
from autotune.measure.figures import percentile, report_chunks
from autotune.measure.loop import _Chunks
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.readings import Progress, peak_rss_bytes

#: Steps a discovery run lets the script take before it ends it: the loop's calls that come
#: after the first step (``rt.zero_grad`` after the optimizer step) are made by then.
DISCOVER_STEPS = 2


class ScriptWindow:
    """One trial's window over the steps a user's script reports."""

    def __init__(self, req: TrialRequest, result_path: Path, unwind: bool = False):
        self.req, self.result_path = req, result_path
        #: A rank under the launcher ends by unwinding to its entry (WindowEnded), whose
        #: return the launcher waits for; a trial of one process ends at once (end_process).
        self.unwind = unwind
        self.win = req.window
        self.device = torch.device(req.device)
        self.clock = Clock(self.device)
        self.progress = Progress(req.progress_path)
        self.result = WindowResult()
        self.steps = 0  # every step the script reported
        self.numerics = int(req.numerics_steps or 0)
        self.losses: list[float] = []
        self.optimizer = ""
        self._t0 = time.perf_counter()
        self._first_s: float | None = None
        self._chunks: _Chunks | None = None
        self._marks: list[Any] = []
        self._units: list[float] = []
        self._wait_s = 0.0
        self._load0: Snapshot | None = None
        self._profiler: Profiled | None = None
        self.progress.beat("compile", 0, force=True)

    def meter_made(self) -> None:
        """The script made its meter, just before its loop: the first step's seconds (its
        compile and start-up cost) count from here, not from the script's imports and data."""
        if self._first_s is None:
            self._t0 = time.perf_counter()

    @property
    def warmup(self) -> int:
        return max(1, sized(self.win.warmup_steps))

    def needed(self) -> str:
        """The steps a window takes, in words, for the message of a script that ran fewer."""
        if self.numerics:
            return f"{self.numerics} steps for the numerics check"
        measured = ""
        if self._chunks is not None and self._marks:
            ran = time.perf_counter() - self._chunks.start
            measured = f"; it measured {len(self._marks)} steps in {ran:.1f} s"
        return (f"{self.warmup} warm-up steps, then {sized(self.win.measure_steps)} measured "
                f"steps lasting at least {self.win.min_measure_seconds:g} s{measured}")

    def step(self, samples: int, wait_s: float, loss: float | None) -> None:
        """One step of the script's loop. Ends the process once the window is measured."""
        self.steps += 1
        if self._profiler is not None:
            self._profile_step()
            return
        if self.numerics:
            self._numerics_step(loss)
            return
        if self._chunks is None:
            self._warm_step(loss)
            return
        self._marks.append(self.clock.mark())
        self._units.append(float(samples))
        self._wait_s += wait_s
        n, now = len(self._marks), time.perf_counter()
        chunks = self._chunks
        at_edge = chunks.at_edge(n, now, self._marks[-1])
        if at_edge and self._load0 is not None:
            self.progress.contended = between(self._load0, snapshot())["contended"]
        self.progress.beat("measure", n,
                           force=report_chunks(self.clock, chunks.edges, self.progress,
                                               self._units))
        if at_edge:
            chunks.decide(n, now)
        if chunks.finishing:
            self._finish(loss)

    def _warm_step(self, loss: float | None) -> None:
        if self._first_s is None:
            self.clock.sync(self.device)
            self._first_s = time.perf_counter() - self._t0
            self.progress.compile_s = self._first_s
        self.progress.beat("warmup", self.steps)
        if self.steps >= self.warmup:
            self._check(loss, "warm-up")
            self.clock.sync(self.device)
            self.result.warmup_s = time.perf_counter() - self._t0
            self._load0 = snapshot()
            self._chunks = _Chunks(self.win, self.clock, _agreement())

    def _numerics_step(self, loss: float | None) -> None:
        if loss is None:
            self.end("crash", "the numerics check needs each step's loss: report it with "
                     "meter.step(batch_size, loss=loss) in your loop")
        self.losses.append(self._check(loss, f"step {self.steps}"))
        self.progress.beat("numerics", self.steps)
        if len(self.losses) >= self.numerics:
            self.result.losses = list(self.losses)
            self.end("ok")

    def _check(self, loss: float | None, where: str) -> float:
        if loss is None:
            return math.nan
        value = float(loss)
        if not math.isfinite(value):
            self.end("nan", f"loss is {value} after {where}")
        return value

    def _finish(self, loss: float | None) -> None:
        self.clock.sync(self.device)
        assert self._chunks is not None
        elapsed = time.perf_counter() - self._chunks.start
        report_chunks(self.clock, self._chunks.edges, self.progress, self._units)
        res, n = self.result, len(self._marks)
        start = self._chunks.edges[0][0]
        ends = [start, *self._marks]
        step_ms = [self.clock.ms(ends[i - 1], ends[i]) for i in range(1, n + 1)]
        res.steps, res.samples, res.measure_s = n, int(sum(self._units)), elapsed
        res.samples_per_sec = sum(self._units) / elapsed
        res.chunks = list(self.progress.chunks)
        res.step_ms = {"median": statistics.median(step_ms), "p10": percentile(step_ms, 0.1),
                       "p90": percentile(step_ms, 0.9), "p25": percentile(step_ms, 0.25),
                       "p75": percentile(step_ms, 0.75), "mean": 1e3 * elapsed / n}
        res.timers = {"data_wait": min(1.0, self._wait_s / elapsed) if elapsed > 0 else None,
                      "h2d": None, "compute": None, "optimizer": None,
                      "step_ms": 1e3 * elapsed / n}
        res.compile_s = max(0.0, (self._first_s or 0.0) - res.step_ms["median"] / 1e3)
        if self._load0 is not None:
            res.contention = between(self._load0, snapshot())
        res.final_loss = self._check(loss, "the measured window") if loss is not None else None
        if self.win.profile and self.req.trace_path:
            self._profiler = Profiled(self.device, sized(self.win.profile_steps),
                                      self.req.trace_path)
            return
        self.end("ok")

    def _profile_step(self) -> None:
        """A step under the profiler after the window (measure/profiling.py's capture, over
        the script's own steps); its summary is what the diagnosis reads of the trace."""
        assert self._profiler is not None
        self.progress.beat("profile", self.steps, force=True)
        if self._profiler.step():
            self.result.trace = self._profiler.summary
            self.result.extras_s += self._profiler.seconds
            self.end("ok")

    def end(self, outcome: str, error: str = "") -> None:
        """Write the result and end the trial's process here, its loader workers with it."""
        res = self.result
        res.outcome, res.error = outcome, error
        res.optimizer = res.optimizer or self.optimizer
        res.peak_memory_gb = _peak_gb(self.device)
        atomic_write(self.result_path, res.to_json(), durable=False)
        if self.unwind:
            end_children()
            raise WindowEnded(outcome)
        end_process(0)


class Profiled:
    """torch.profiler over the script's next steps: one warm-up step, then ``steps`` recorded,
    the Chrome trace written and summarized (diagnose/trace_summary.py). Never fails the
    trial: a failed capture is ``{"error": ...}``, as the window's own capture says it."""

    def __init__(self, device: torch.device, steps: int, trace_path: str):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.steps, self.path, self.done = max(1, steps), Path(trace_path), 0
        self.summary: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self.seconds = 0.0
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.prof = profile(activities=activities, profile_memory=True, record_shapes=False,
                            schedule=schedule(wait=0, warmup=1, active=self.steps, repeat=1),
                            on_trace_ready=lambda p: p.export_chrome_trace(str(self.path)))
        self.prof.start()

    def step(self) -> bool:
        """One step done; True once the capture is over (its summary then set)."""
        self.done += 1
        self.prof.step()
        if self.done < 1 + self.steps:
            return False
        try:
            self.prof.stop()
            import json

            if not self.path.exists():  # the schedule's cycle did not complete: what there is
                self.prof.export_chrome_trace(str(self.path))

            from autotune.diagnose.trace_summary import summarize_trace

            trace = json.loads(self.path.read_text())
            self.summary = {**summarize_trace(trace, self.steps), "trace_path": str(self.path)}
        except Exception as exc:  # noqa: BLE001 - the summary is evidence; never fail the trial
            self.summary = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        self.seconds = time.perf_counter() - self.t0
        return True


def _agreement() -> Any:
    """Ranks of a launched script (its own process group): one decision at each chunk edge
    (measure/comm.agree), so that every rank ends its window at the same step and none is
    left in a collective with a rank that ended."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    from autotune.measure.comm import agree

    return agree


def _peak_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.max_memory_reserved(device)) / 2**30
    return peak_rss_bytes() / 2**30


class WindowEnded(BaseException):
    """A launched rank's window is measured: unwinds the script to the rank's entry (not an
    Exception, so that a script's ``except Exception`` does not take it for its own)."""


def end_process(code: int) -> None:
    """Stop here: kill this process's children (DataLoader workers), flush, exit without
    running the script's remaining code, its ``finally`` blocks or its atexit hooks."""
    end_children()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def end_children() -> None:
    """Kill this process's children (DataLoader workers). The DataLoader's SIGCHLD handler,
    which raises in the loop when a worker dies, is put back to the default first: here the
    workers' end is ours."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        children = psutil.Process().children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        psutil.wait_procs(children, timeout=5)
    except BaseException:  # noqa: BLE001 - the process ends whatever happens here
        pass


_current: ScriptWindow | None = None


def start(req: TrialRequest, result_path: Path, unwind: bool = False) -> ScriptWindow:
    """Make this process's window (the script's Runtime finds it with ``current()``)."""
    global _current
    _current = ScriptWindow(req, result_path, unwind)
    return _current


def current() -> ScriptWindow | None:
    """The window of the script trial running in this process, if any."""
    return _current
