"""A window measured while the machine was busy is measured again (driver side).

The trial's window states the load it saw (measure/contention.py). One taken while other
processes held the cores reads whatever share of the machine the trial got, not what its
configuration can do: the search would rank the machine's moods. So a contended window is run
again after a short wait, a bounded number of times (diagnose/thresholds.py); the first quiet
reading stands, or, on a machine that stays busy, the last one with its load named. Nothing is
pruned on a chunk read under contention (loop.driver.Driver.pruning_check).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from autotune.core.console import detail
from autotune.diagnose.thresholds import CONTENDED_WAIT_S
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.runner import Interrupted

log = logging.getLogger("autotune")

Measure = Callable[[TrialRequest, Path], WindowResult]


class BusyMachine:
    """Whether re-measuring still pays: after ``STAYED_BUSY`` trials in a row whose windows
    stayed contended through their re-measurements, the load is not passing, and waiting for
    it would only multiply the study's time; windows are then taken once, their load named,
    until one is quiet again."""

    STAYED_BUSY = 2

    def __init__(self) -> None:
        self.streak = 0

    def retries(self, configured: int) -> int:
        """The re-measurements the next window gets: ``configured`` (study.remeasure_contended)
        until the machine has stayed busy, then none."""
        if self.streak >= self.STAYED_BUSY:
            if self.streak == self.STAYED_BUSY:
                log.warning("the machine has stayed busy through %d trials' re-measurements: "
                            "windows are taken once from now on, each with its load named",
                            self.streak)
            return 0
        return configured

    def saw(self, result: WindowResult) -> None:
        if not result.ok:
            return
        self.streak = self.streak + 1 if contended(result) else 0


def contended(result: WindowResult) -> bool:
    return bool(result.contention.get("contended"))


def load_words(contention: dict) -> str:
    """The load in a few words: "other processes used 1.0 of 2 cores and ..." """
    return "; ".join(contention.get("reasons") or []) or "no load seen"


def measure_settled(measure: Measure, req: TrialRequest, trial_dir: Path, label: str,
                    stop_requested: Callable[[], str | None],
                    retries: int, wait_s: float = CONTENDED_WAIT_S) -> WindowResult:
    """Measure; while the window was contended (and measured: a pruned or failed trial is
    what it is), wait ``wait_s`` and measure again, at most ``retries`` times. The result
    carries the earlier readings under ``contention["earlier"]``, and the first window's
    compile (``_first_compile``)."""
    result = first = measure(req, trial_dir)
    earlier: list[dict] = []
    while result.ok and contended(result) and len(earlier) < retries:
        earlier.append({"samples_per_sec": round(result.samples_per_sec, 3),
                        "rate": round(result.rate, 3), "unit": result.unit,
                        "reasons": result.contention.get("reasons", [])})
        detail("%s: window contended (%s): measuring again in %.0fs", label,
                 load_words(result.contention), wait_s)
        _wait(wait_s, stop_requested)
        result = measure(req, trial_dir)
    if earlier:
        result.contention["earlier"] = earlier
        _first_compile(result, first)
        if contended(result):
            log.warning("%s: the machine stayed busy through %d re-measurement(s): %s", label,
                        len(earlier), load_words(result.contention))
    return result


def _first_compile(result: WindowResult, first: WindowResult) -> None:
    """A re-measured trial's compile is its first window's: that window compiled cold and
    filled the study's inductor cache, so the next one compiles warm from it (a compiled MLP
    re-measured beside a load recorded 2 cache hits and no miss as its trial's first compile,
    2026-11-27). A run of the configuration pays the cold compile, so the trial's compile cost,
    its cold/warm count and its run_steps objective are the first window's, read under the load
    that made it re-measure (an upper bound); the re-measured window's own compile time is kept
    beside it (``remeasured_compile_s``)."""
    if first.compile_cache or first.compile_s:
        result.contention["remeasured_compile_s"] = round(result.compile_s, 3)
        result.compile_s, result.compile_cache = first.compile_s, dict(first.compile_cache)


def _wait(seconds: float, stop_requested: Callable[[], str | None]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stop = stop_requested()
        if stop:
            raise Interrupted(stop)
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
