"""The CUDA faults, made real (skipped without a GPU): each ends its trial with the right
outcome, and the next trial runs in a fresh process and CUDA context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from tests.workloads_diag import SyncWorkload, baseline_knobs, spec

pytestmark = pytest.mark.gpu

WINDOW: dict[str, Any] = {"warmup_steps": 3, "measure_steps": 6, "measure_seconds": 3.0,
                          "min_measure_steps": 2, "timeout_s": 180.0, "stall_s": 120.0,
                          "profile": False, "profile_steps": 2}
MLP = {"_target_": "autotune.workloads.mlp.MLPWorkload", "n_samples": 512}


def _knobs(**pins: Any) -> dict[str, Any]:
    from autotune.workloads.mlp import MLPWorkload

    return {**baseline_knobs(MLPWorkload(n_samples=512), "cuda"), **pins}


def test_cuda_oom_is_an_outcome_with_its_memory(tmp_path: Path) -> None:
    req = TrialRequest(workload={"_target_": "tests.workloads_cuda.HugeActivation"},
                       knobs=_knobs(batch_size=2**14), device="cuda", window=WINDOW)
    res = run_window(req, tmp_path)
    assert res.outcome == "oom", (res.outcome, res.error, res.stderr_tail[-1000:])
    assert "out of memory" in res.error.lower()
    assert res.peak_memory_gb > 0  # what it held when the batch did not fit (the weights)


def test_cuda_oom_trial_is_recorded_infeasible(tmp_path: Path) -> None:
    """Through the driver: the OOM trial is COMPLETE but infeasible, with its memory; the
    study goes on (the baseline beside it is measured)."""
    from optuna.trial import TrialState

    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig
    from autotune.search.loop.driver import Driver

    cfg = Config(workload={"_target_": "tests.workloads_cuda.HugeActivation"}, device="cuda",
                 study=StudyConfig(out_dir=str(tmp_path), agent=False, confirm_runs=0),
                 window=WindowConfig(**WINDOW))
    setup = build_setup(cfg, [])[0]
    driver = Driver(setup)
    driver.prepare()
    driver.run(1)
    t = driver.study.trials[0]
    assert t.user_attrs["outcome"] == "oom", t.user_attrs.get("reason")
    assert t.state == TrialState.COMPLETE and t.constraints["peak_memory_gb"] > 0
    assert t.user_attrs["peak_memory_gb"] > 0


def test_illegal_memory_access_crashes_only_its_trial(tmp_path: Path) -> None:
    req = TrialRequest(workload={"_target_": "tests.workloads_cuda.IllegalAddress", "n_samples": 512},
                       knobs=_knobs(), device="cuda", window=WINDOW)
    res = run_window(req, tmp_path / "poisoned")
    assert res.outcome == "crash", (res.outcome, res.error)
    assert "illegal memory access" in (res.error + res.stderr_tail).lower()
    nxt = run_window(TrialRequest(workload=MLP, knobs=_knobs(), device="cuda", window=WINDOW),
                     tmp_path / "next")
    assert nxt.outcome == "ok", (nxt.error, nxt.stderr_tail[-1000:])


def test_host_sync_inside_a_captured_step_is_capture_failed(tmp_path: Path) -> None:
    knobs = {**baseline_knobs(SyncWorkload(), "cuda"), "cuda_graphs": True, "amp": "off",
             "compile": "off"}
    res = run_window(TrialRequest(workload=spec(SyncWorkload), knobs=knobs, device="cuda",
                                  window=WINDOW), tmp_path)
    assert res.outcome == "capture_failed", (res.outcome, res.error, res.stderr_tail[-1000:])
    assert "capture" in res.error.lower()
