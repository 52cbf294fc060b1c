"""Ceilings are upper bounds: the loader alone, measured in steady state, in a real trial.

The sleeping loader's rate is set by its sleeps (10 ms an item, so ``workers`` x 100 items/s),
not by the CPU: these hold on a loaded 2-core machine. Batches of 16 keep the per-batch CPU
work (collate, queue transfer) small against the sleeps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from autotune.measure.ceilings import _slope
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from tests.conftest import TINY_WINDOW
from tests.workloads_diag import SleepyLoaderWorkload, baseline_knobs, spec

WINDOW = {**TINY_WINDOW, "measure_steps": 12, "measure_seconds": 8.0, "min_measure_seconds": 1.0}


def sleepy_request(workers: int, batch_size: int = 16) -> TrialRequest:
    knobs: dict[str, Any] = {**baseline_knobs(SleepyLoaderWorkload()), "num_workers": workers,
                             "batch_size": batch_size, "pin_memory": False}
    if workers:
        knobs |= {"persistent_workers": True, "prefetch_factor": 2}
    # Enough items that no epoch (and, for workers > 0, no worker restart) ends in the window.
    return TrialRequest(workload=spec(SleepyLoaderWorkload, n=4096), knobs=knobs, device="cpu",
                        window=WINDOW, ceilings={"loader": True})


@pytest.mark.parametrize("workers", [1, 2, 11, 16])
def test_loader_ceiling_is_the_physical_rate(tmp_path: Path, workers: int) -> None:
    """Within 15% of workers / 10 ms, not the first prefetched burst (11 workers read 1,439
    samples/s and 16 read 2,414 when the burst was timed); and the trial beside it, warm
    workers and all, does not beat it."""
    res = run_window(sleepy_request(workers), tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    limit = workers * 100.0
    ceiling = res.ceilings["loader"]
    assert abs(ceiling - limit) / limit < 0.15, (ceiling, limit)
    assert 0 <= res.ceiling_noise["loader"] < 1
    assert res.samples_per_sec <= ceiling * 1.15, (res.samples_per_sec, ceiling)


def test_loader_ceiling_repeats_in_fresh_trials(tmp_path: Path) -> None:
    """One configuration measured three times, each in a fresh trial process: spread < 15%."""
    rates = [run_window(sleepy_request(4), tmp_path / str(i)).ceilings["loader"] for i in range(3)]
    assert (max(rates) - min(rates)) / min(rates) < 0.15, rates


def test_slope_reads_rounds_of_arrivals_without_bias() -> None:
    """Batches that arrive in rounds (4 at once every 80 ms) give 50 batches/s whichever
    batch the timing starts on; a count over the time since the first one reads high."""
    rounds = [r * 0.08 for r in range(6) for _ in range(4)]
    for skip in range(4):
        assert _slope(rounds[skip:]) == pytest.approx(50.0, rel=0.05)
    assert (len(rounds) - 1) / (rounds[-1] - rounds[0]) > 55  # the old reading: 57.5


def _setup(tmp_path: Path, **study: Any) -> Any:
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig

    cfg = Config(workload=spec(SleepyLoaderWorkload, n=512), device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False, **study),
                 window=WindowConfig(**{**TINY_WINDOW, "profile": False}))
    return build_setup(cfg, [f"window.{k}={v}" for k, v in TINY_WINDOW.items()])[0]


def test_a_beaten_ceiling_is_recorded_and_never_prunes(tmp_path: Path) -> None:
    """A cached loader ceiling far below what the trial then trains at (a mismeasurement) is
    recorded on the trial and in trials.csv, and the study stops trusting it."""
    import csv

    from autotune.results.export import write_exports
    from autotune.search.loop.driver import Driver
    from autotune.search.pruning import cache_ceilings, cached_ceilings, ceiling_verdict

    setup = _setup(tmp_path)
    driver = Driver(setup)
    driver.prepare()
    knobs = setup.space.baseline
    cache_ceilings(driver.study, knobs, {"loader": 5.0}, {"loader": 0.01})  # ~100 in truth
    assert ceiling_verdict(cached_ceilings(driver.study, knobs), best=50.0)  # it would prune
    assert driver.run(1) == 1
    trial = driver.study.trials[0]
    assert trial.user_attrs["outcome"] == "ok"
    assert "above its own loader ceiling of 5.0" in trial.user_attrs["ceiling_violation"]
    assert "loader" not in cached_ceilings(driver.study, knobs)  # never prunes, never re-cached
    cache_ceilings(driver.study, knobs, {"loader": 5.0})
    assert "loader" not in cached_ceilings(driver.study, knobs)
    write_exports(driver.study, setup.out_dir, setup.storage)
    rows = list(csv.DictReader((setup.out_dir / "trials.csv").open()))
    # Its words follow the window's own noise (test below): on a noisy VM the window spread
    # 13% and said "unsteady (loaded) machine" (.ci/run, 2026-11-28), where this line asked
    # for "measurement bug" alone.
    assert rows[0]["ceiling_violation"] == trial.user_attrs["ceiling_violation"]


def test_a_beaten_ceiling_is_a_measurement_bug_on_a_steady_machine_else_maybe_the_load() -> None:
    """Within NOISE_FLOOR the trial and its ceiling agree to the floor and a violation is a
    bug; past it the machine's speed may have moved between the two measurements."""
    from autotune.search.pruning import NOISE_FLOOR, ceiling_violations

    steady = ceiling_violations(87.5, {"loader": 5.0}, {"loader": 0.01, "window": 0.02})
    assert steady["loader"].startswith("trained at 87.5 samples/s, above its own loader "
                                       "ceiling of 5.0 (noise 10%): a measurement bug")
    noisy = ceiling_violations(87.5, {"loader": 5.0}, {"window": NOISE_FLOOR + 0.03})
    assert "(noise 13%): measured on an unsteady (loaded) machine" in noisy["loader"]
    assert ceiling_violations(5.4, {"loader": 5.0}, {"window": 0.02}) == {}  # within the floor


def test_compute_ceiling_is_timed_long_enough_and_states_its_noise(tmp_path: Path) -> None:
    """The step alone, in two synchronized halves of at least a quarter of the minimum window
    each (six 1 ms steps were once the whole measurement)."""
    from tests.workloads_diag import ComputeWorkload

    req = TrialRequest(workload=spec(ComputeWorkload), knobs=baseline_knobs(ComputeWorkload()),
                       device="cpu", window={**WINDOW, "min_measure_seconds": 0.4},
                       ceilings={"compute": True})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    # The noise is |half 1 - half 2| / the whole's rate: beside other work on 2 cores it read
    # 1.09 (2026-11-27), so only its presence and sign are the test's to assert.
    assert res.ceilings["compute"] > 0 and 0 <= res.ceiling_noise["compute"] < math.inf


def test_a_slow_step_keeps_the_ceilings_and_profile_within_their_time_and_heartbeat(
        tmp_path: Path) -> None:
    """Beside `stress-ng --cpu 1` a ResNet step took 3.5 s; the compute ceiling then ran its 16
    steps (twice, re-measured) and the profiler its 4 without a heartbeat, and every trial was
    killed as stalled at 120 s. Here a 0.3 s step against a 3 s stall limit (the old ceiling's
    two halves of 8 steps went 4.8 s silent): the ceiling stops at its time cap (a quarter of
    measure_seconds) and both beat after each step."""
    from tests.workloads_diag import SlowStepWorkload

    window = {**WINDOW, "measure_steps": 16, "measure_seconds": 0.8, "min_measure_steps": 2,
              "min_measure_seconds": 0.0, "stall_s": 3.0, "profile": True, "profile_steps": 3}
    req = TrialRequest(workload=spec(SlowStepWorkload), knobs=baseline_knobs(SlowStepWorkload()),
                       device="cpu", window=window, ceilings={"compute": True}, trace=True,
                       trace_path=str(tmp_path / "trace.json"))
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", (res.outcome, res.error)
    assert res.ceilings["compute"] > 0  # measured, not a stall's kill (no timing asserted)
    assert res.trace and "error" not in res.trace, res.trace
