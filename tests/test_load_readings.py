"""The loader's CPU demand read from schedstat: time on a CPU plus runqueue wait, never sleep."""

from __future__ import annotations

import time

from autotune.measure.readings import thread_busy_s


def test_a_sleep_is_not_cpu_demand_but_computing_is() -> None:
    """A sleeping thread is not runnable (a loader waiting on I/O reads as waiting); a thread
    that spins counts its whole wall time whether it got a core or waited for one (on a
    loaded machine, a computing loader still reads as computing)."""
    b0 = thread_busy_s()
    time.sleep(0.3)
    slept = thread_busy_s() - b0
    b0, w0 = thread_busy_s(), time.perf_counter()
    while time.perf_counter() - w0 < 0.3:
        pass
    spun = thread_busy_s() - b0
    assert slept < 0.1, slept
    assert spun > 0.25, spun
