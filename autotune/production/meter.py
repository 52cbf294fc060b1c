"""The production meter: does the user's run get the speed the study measured?

The loop calls ``meter.step(batch_size)`` once per step (no loader needed: a loop whose
batches come from a function counts its steps the same way); after ``warmup_steps`` it reads
the host clock every ``window_steps`` steps (no device synchronization: over a window of tens of
steps the host cannot run further ahead of the device than its queue, so the host rate is the
device's) and compares samples/sec with the study's confirmed figure. The first window more
than ``tolerance`` below it gives ONE ``SlowerThanMeasured`` warning with the likely cause,
read by the diagnosis rules of ``autotune/diagnose/verdicts.py`` (same thresholds, same wording)
from the share of the window the loop spent waiting for its next batch, which ``wrap(loader)``
times on the host; batches from a function (nanoGPT's ``get_batch``) are timed by
``with meter.wait():`` around the call, or by ``Runtime.batches(get_batch)``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from autotune.core import distributed
from autotune.diagnose import verdicts as diagnosis
from autotune.measure.contention import Snapshot, between, snapshot
from autotune.production.best import BestConfig

#: A window this far below the study's confirmed samples/sec warns.
TOLERANCE = 0.15
#: Where a meter writes its summary when the process exits (set by ``autotune verify``).
OUT_ENV = "AUTOTUNE_METER_OUT"
#: ``WARMUP,STEPS`` (set by ``autotune verify`` on a script's side): the meter's warm-up and
#: one window of that many steps, after which the run ends, its summary written: a side of
#: verify's rounds is its window, not the script's whole run.
WINDOW_ENV = "AUTOTUNE_METER_WINDOW"
#: The machine's load is read at a window's end at most this often: a reading (a few /proc
#: reads, 1.5 ms on this project's 2-core VM) at every 50 steps of a fast GPU loop would cost
#: it more; at most every 0.25 s it is under 1% of the host's time, and the summary's reading
#: still covers all but the run's last quarter second.
LOAD_EVERY_S = 0.25


class SlowerThanMeasured(UserWarning):
    """The production run is slower than the study's confirmed figure."""


def distributed_barrier() -> None:
    """Under torchrun every rank reaches its window's end at the same step: wait for the
    others, so that no rank ends while another is in a collective with it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class Timed:
    """``meter.wrap(loader)``: iterates the loader, each wait for a batch timed for the
    meter; ``len()`` is the loader's (a recipe's ``MetricLogger.log_every`` reads it)."""

    def __init__(self, loader: Iterable[Any], meter: Meter):
        self.loader, self.meter = loader, meter

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.loader)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.meter._waited(time.perf_counter() - t)
            yield batch


class Meter:
    """Samples/sec of the user's loop against ``expected`` (the study's confirmed figure).

    ``knobs``/``device``/``memory_limit_gb`` feed the diagnosis rules that name the cause."""

    def __init__(self, expected_samples_per_sec: float | None, *,
                 knobs: dict[str, Any] | None = None, device: str = "cpu",
                 memory_limit_gb: float | None = None, measured_data_wait: float | None = None,
                 warmup_steps: int = 20, window_steps: int = 50, tolerance: float = TOLERANCE,
                 on_step: Callable[[int, float, Any], None] | None = None):
        if expected_samples_per_sec is not None and expected_samples_per_sec <= 0:
            raise ValueError(f"expected_samples_per_sec={expected_samples_per_sec!r}: must be > 0 "
                             "(best.yaml's metrics.samples_per_sec)")
        if warmup_steps < 0 or window_steps < 1 or not 0 < tolerance < 1:
            raise ValueError(f"warmup_steps={warmup_steps} (>= 0), window_steps={window_steps} "
                             f"(>= 1), tolerance={tolerance} (between 0 and 1) are not all valid")
        #: None: nothing to compare with (a script's own run before any study, or a trial).
        self.expected = None if expected_samples_per_sec is None else float(expected_samples_per_sec)
        #: Each step's samples, wait for its batch and loss go here too (a script trial's
        #: window, production/settings.py).
        self.on_step = on_step
        self._wait_all = 0.0  # every wait since the run began
        self._wait_seen = 0.0  # ... up to the last step given to on_step
        self.knobs = dict(knobs or {})
        self.device, self.memory_limit_gb = device, memory_limit_gb
        self.measured_data_wait = measured_data_wait
        self.warmup_steps, self.window_steps, self.tolerance = warmup_steps, window_steps, tolerance
        self.steps = 0
        self.samples_per_sec: float | None = None  # the last full window's figure
        self.data_wait_share: float | None = None  # ...and its loader wait (wrap() only)
        self.warning: str | None = None  # the one warning given, if any
        self._t0: float | None = None
        self._samples = 0
        self._wait = 0.0
        self._counted = 0  # steps in the current window
        self._wrapped = False
        self._batch_sizes: set[int] = set()
        # Over every window so far (summary(); autotune verify reads it at exit).
        self._total_samples, self._total_s, self._total_wait = 0, 0.0, 0.0
        self._total_steps = 0
        # The machine's load over the measured windows (measure/contention.py): from the first
        # window's start to the latest reading at a window's end.
        self._load0: Snapshot | None = None
        self._load1: Snapshot | None = None
        self._end_at: int | None = None  # the step after which the run ends (WINDOW_ENV)
        if os.environ.get(WINDOW_ENV):
            warm, steps = (int(v) for v in os.environ[WINDOW_ENV].split(","))
            self.warmup_steps, self.window_steps, self._end_at = warm, steps, warm + steps
        if os.environ.get(OUT_ENV) and os.environ.get("RANK", "0") == "0":  # one writer per run
            atexit.register(self.write_summary, os.environ[OUT_ENV])

    @classmethod
    def from_best(cls, best: BestConfig, *, device: str | None = None, **kwargs: Any) -> Meter:
        """A meter against best.yaml's confirmed samples/sec."""
        expected = best.metrics.get("samples_per_sec")
        if not expected:
            raise ValueError("best.yaml has no metrics.samples_per_sec to compare with")
        doc = best.document
        return cls(float(expected), knobs=best.knobs,
                   device=device or (doc.get("device") or {}).get("type") or "cpu",
                   memory_limit_gb=doc.get("memory_limit_gb"),
                   measured_data_wait=best.metrics.get("data_wait_share"), **kwargs)

    def wrap(self, loader: Iterable[Any]) -> Timed:
        """The loader's batches, timing how long the loop waits for each (host clock); its
        ``len()`` is the loader's, for a loop that logs its progress by it."""
        self._wrapped = True
        return Timed(loader, self)

    def _waited(self, seconds: float) -> None:
        self._wait += seconds
        self._wait_all += seconds

    def add_wait(self, seconds: float) -> None:
        """Count ``seconds`` as the loop's wait for its next batch, timed by the caller (a
        framework's loop, whose fetch no ``wrap`` or ``wait`` can reach: adapters/*_script.py)."""
        self._wrapped = True
        self._waited(seconds)

    @contextlib.contextmanager
    def wait(self) -> Iterator[None]:
        """The time inside counts as the loop waiting for its next batch, as ``wrap`` counts
        a loader's: for batches that no iterable gives, ``with meter.wait(): x, y =
        get_batch("train")`` (``Runtime.batches`` does this for you)."""
        self._wrapped = True
        t = time.perf_counter()
        try:
            yield
        finally:
            self._waited(time.perf_counter() - t)

    def step(self, batch_size: int, loss: Any = None) -> None:
        """Count one training step of ``batch_size`` samples. Costs a clock read; every
        ``window_steps`` steps after warm-up the window's figure is compared. ``loss``: the
        step's loss (a tensor is read only where needed): a study of your script compares
        configurations' losses with it (the numerics check)."""
        if self.on_step is not None:
            waited, self._wait_seen = self._wait_all - self._wait_seen, self._wait_all
            self.on_step(int(batch_size) * distributed.world_size(), waited, loss)
        self.steps += 1
        if self.steps <= self.warmup_steps:
            if self.steps == self.warmup_steps:
                self._start(time.perf_counter())
            return
        if self._t0 is None:  # warmup_steps=0: the first step opens the first window
            self._start(time.perf_counter())
            return
        # A rank of a DDP run: every rank steps together, so the run's samples are this
        # rank's times the ranks (best.yaml's samples/sec are the whole run's too).
        self._samples += int(batch_size) * distributed.world_size()
        self._counted += 1
        self._batch_sizes.add(int(batch_size))
        if (self.steps - self.warmup_steps) % self.window_steps == 0:
            now = time.perf_counter()
            elapsed = now - self._t0
            self.samples_per_sec = self._samples / elapsed if elapsed > 0 else None
            self.data_wait_share = min(1.0, self._wait / elapsed) if self._wrapped and elapsed > 0 \
                else None
            self._total_samples += self._samples
            self._total_s += elapsed
            self._total_wait += self._wait
            self._total_steps += self._counted
            slow = (self.warning is None and self.samples_per_sec is not None
                    and self.expected is not None
                    and self.samples_per_sec < (1 - self.tolerance) * self.expected)
            if slow or self._load1 is None or time.monotonic() - self._load1.at >= LOAD_EVERY_S:
                last, self._load1 = self._load1 or self._load0, snapshot()
                if slow:  # the load since the last reading: this window's, at least
                    self.warning = self._message(between(last, self._load1) if last else None)
                    warnings.warn(self.warning, SlowerThanMeasured, stacklevel=2)
            self._start(now)
        if self._end_at is not None and self.steps >= self._end_at:
            self._end_run()

    def _end_run(self) -> None:
        """verify's side has its window: the summary written, the run ends here (its
        evaluation and saving are not what verify measures)."""
        from autotune.measure.script_window import end_process

        if os.environ.get(OUT_ENV) and os.environ.get("RANK", "0") == "0":
            self.write_summary(os.environ[OUT_ENV])
        distributed_barrier()
        end_process(0)

    def summary(self) -> dict[str, Any]:
        """samples/sec over every full window since warm-up (not only the last), the mean
        time per step, and (batches timed by ``wrap`` or ``wait``) the share of that time the
        loop waited for its batches, split per step into ``between_ms`` (the wait) and
        ``inside_ms`` (the rest), which ``autotune verify`` sets beside the study's window."""
        if self._total_s <= 0:
            return {"samples_per_sec": None, "steps": self.steps}
        step_ms = 1e3 * self._total_s / self._total_steps
        out: dict[str, Any] = {
            "samples_per_sec": self._total_samples / self._total_s, "steps": self.steps,
            "seconds": self._total_s, "step_ms": step_ms,
            "data_wait_share": self._total_wait / self._total_s if self._wrapped else None}
        if self._wrapped:
            wait_ms = 1e3 * self._total_wait / self._total_steps
            out.update(between_ms=wait_ms, inside_ms=step_ms - wait_ms)
        if self._load0 is not None and self._load1 is not None and self._load1.at > self._load0.at:
            out["contention"] = between(self._load0, self._load1)
        return out

    def contention(self) -> dict[str, Any] | None:
        """What else the machine did while this run was measured (measure/contention.py's
        reading: other processes' cores, the run's wait for a CPU, steal, CPU quota), and
        whether that makes its figure ``contended``; None before a full window."""
        return self.summary().get("contention")

    def write_summary(self, path: str) -> None:
        """The summary as JSON (``autotune verify --script`` sets AUTOTUNE_METER_OUT so that
        the user's script, unchanged, reports its rate when it exits)."""
        Path(path).write_text(json.dumps(self.summary()))

    def _start(self, now: float) -> None:
        self._t0, self._samples, self._wait, self._counted = now, 0, 0.0, 0
        if self._load0 is None:
            self._load0 = snapshot()

    def _message(self, load: dict[str, Any] | None) -> str:
        rate, expected = self.samples_per_sec or 0.0, self.expected or 0.0
        head = (f"autotune meter: this run trains at {rate:,.1f} samples/s over its last "
                f"{self.window_steps} steps, {100 * (1 - rate / expected):.0f}% below the "
                f"study's confirmed {expected:,.1f} samples/s.")
        if load and load.get("contended"):  # the study's figure is a quiet machine's
            return (f"{head} Likely cause: the machine was busy with other work while it ran: "
                    f"{'; '.join(load.get('reasons') or [])}; the study measured its windows "
                    "on a quiet machine.")
        return f"{head} Likely cause: {self._cause()}"

    def _cause(self) -> str:
        measured_bs = self.knobs.get("batch_size")
        batch = ""
        if measured_bs and self._batch_sizes and self._batch_sizes != {int(measured_bs)}:
            batch = (f" Note: the study measured batch_size={measured_bs}; this loop's "
                     f"batches are {sorted(self._batch_sizes)}.")
        dw = self.data_wait_share
        if dw is None:
            return ("unknown: this loop's wait for its batches is not timed (iterate over "
                    "meter.wrap(loader); for batches from a function, get_batch = "
                    "rt.batches(get_batch), or `with meter.wait():` around the call) to tell a "
                    "loader slower than measured from a slower step." + batch)
        verdict = diagnosis.diagnose({"samples_per_sec": self.samples_per_sec,
                                      "timers": {"data_wait": dw}},
                                     self.knobs, self.device, self.memory_limit_gb or 0.0)
        was = (f" (the study measured {100 * self.measured_data_wait:.0f}%)"
               if self.measured_data_wait is not None else "")
        if verdict["bottleneck"] == "input_pipeline":
            return (f"the loader is slower than measured: the loop waits for its next batch "
                    f"{100 * dw:.0f}% of the time{was}, at or above the diagnosis threshold of "
                    f"{100 * diagnosis.DATA_WAIT_SHARE:.0f}% (slower storage, a different "
                    f"dataset or transform, fewer free cores?). {verdict['summary']}" + batch)
        return (f"the step itself is slower than measured: the loop waits for its next batch "
                f"only {100 * dw:.0f}% of the time{was}, under the diagnosis threshold of "
                f"{100 * diagnosis.DATA_WAIT_SHARE:.0f}%, so the model's step takes longer: "
                "another device or library version (load_best warns about those), other "
                "processes sharing the device, a model, batch or loop that differs from the "
                "study's, or per-step host syncs (.item(), printing a tensor) in this loop."
                + batch)
