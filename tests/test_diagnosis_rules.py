"""Rules reviewed for false verdicts (issue 14): epoch restarts of non-persistent workers are
neither I/O nor loading work; per-parameter optimizer work is fixed by the optimizer's
implementation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autotune.diagnose.verdicts import diagnose
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from tests.conftest import TINY_WINDOW
from tests.workloads_diag import SleepyLoaderWorkload, baseline_knobs, spec


@pytest.mark.parametrize("persistent", [False, True])
def test_epoch_restarts_are_named_not_read_as_io(tmp_path: Path, persistent: bool) -> None:
    """A small dataset (8 batches an epoch) of fast items (1 ms) with 2 workers: without
    persistent workers, most of the wait is their start-up at every epoch. The verdict says
    so and keeps them first; it does not call the loader I/O-bound."""
    knobs: dict[str, Any] = {**baseline_knobs(SleepyLoaderWorkload()), "num_workers": 2,
                             "persistent_workers": persistent, "prefetch_factor": 2,
                             "batch_size": 8, "pin_memory": False}
    req = TrialRequest(workload=spec(SleepyLoaderWorkload, n=16, sleep_ms=1.0), knobs=knobs,
                       device="cpu", window={**TINY_WINDOW, "measure_steps": 24,
                                             "min_measure_seconds": 1.0})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    assert res.timers["epoch_starts"] >= 2, res.timers
    d = diagnose(dataclasses.asdict(res), knobs, "cpu", 16.0)
    if persistent:
        assert "anew at every epoch" not in d["summary"]
        return
    assert res.timers["epoch_start_share"] > 0.5 * res.timers["data_wait"], res.timers
    assert d["bottleneck"] == "input_pipeline", d
    assert d["fixes"][0]["knob"] == "persistent_workers", d["fixes"]
    assert "anew at every epoch" in d["summary"] and "I/O" not in d["summary"], d["summary"]
    assert not any(f.get("beyond_domain") for f in d["fixes"])


def test_optimizer_heavy_step_gets_the_fused_optimizer() -> None:
    result = {"outcome": "ok", "samples_per_sec": 100.0, "peak_memory_gb": 1.0,
              "timers": {"data_wait": 0.0, "h2d": 0.01, "compute": 0.5, "optimizer": 0.45},
              "trace": {"gpu_busy_pct": 95.0, "wall_ms_per_step": 10.0}}
    knobs = {"batch_size": 16, "amp": "bf16", "compile": "off", "optimizer_impl": "default"}
    d = diagnose(result, knobs, "cuda", 80.0)
    assert d["bottleneck"] == "gpu_compute"
    assert d["fixes"][0]["knob"] == "optimizer_impl" and d["fixes"][0]["value"] == "fused"
    light = dict(result, timers={**result["timers"], "optimizer": 0.05})
    assert "optimizer_impl" not in [f["knob"] for f in diagnose(light, knobs, "cuda", 80.0)["fixes"]]
