"""A trial's own failure is an outcome with a reason, never an exception or an orphan."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_WINDOW, leftover_trials

FAULTY = "tests.workloads_faulty."


def request(cpu_env: Env, target: str, window: dict[str, Any] | None = None,
            knobs: dict[str, Any] | None = None, **kwargs: Any) -> TrialRequest:
    base = build_space(cpu_env, MLPWorkload(), {}).baseline
    return TrialRequest(
        workload={"_target_": target, "n_samples": 512, **kwargs},
        knobs={**base, **(knobs or {})}, device="cpu", window={**TINY_WINDOW, **(window or {})},
    )


def test_ok_window_reports_measurements(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, "autotune.workloads.mlp.MLPWorkload"), tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    assert res.samples_per_sec > 0 and res.steps >= TINY_WINDOW["min_measure_steps"]
    assert {"median", "p10", "p90"} <= set(res.step_ms)
    assert res.peak_memory_gb > 0 and res.final_loss is not None
    assert {"data_wait", "h2d", "compute", "optimizer"} <= set(res.timers)


@pytest.mark.parametrize("workers", [0, 2])
def test_hanging_loader_is_stopped_without_orphans(cpu_env: Env, tmp_path: Path, workers: int) -> None:
    since = time.time() - 1
    knobs = {"num_workers": workers, "prefetch_factor": 2 if workers else None}
    res = run_window(request(cpu_env, FAULTY + "HangingLoader", {"stall_s": 4.0, "timeout_s": 60.0},
                             knobs), tmp_path)
    assert res.outcome == "stalled", (res.outcome, res.error)
    assert "no progress" in res.error
    time.sleep(0.5)
    assert leftover_trials(since, tmp_path) == []


def test_wall_clock_timeout(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "HangingStep", {"timeout_s": 8.0, "stall_s": 60.0}), tmp_path)
    assert res.outcome == "timeout" and "8s" in res.error
    # Ended by the timeout, not left to the 1-hour hang or the 60 s stall limit; the margin
    # is for the kill and reaping on a loaded machine, not a speed claim.
    assert res.wall_s < 8.0 + 30.0


def test_oom_error_is_classified(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "RaisesOOM"), tmp_path)
    assert res.outcome == "oom", res.error
    assert "out of memory" in res.error


def test_nan_loss_fails_the_trial(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "NaNLoss"), tmp_path)
    assert res.outcome == "nan" and "nan" in res.error.lower()


def test_segfault_in_the_step_is_a_crash(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "SegfaultingStep"), tmp_path)
    assert res.outcome == "crash" and res.signal == "SIGSEGV"


def test_a_sigkill_the_oom_killer_did_not_send_is_a_crash_not_an_oom(cpu_env: Env,
                                                                      tmp_path: Path) -> None:
    """SIGKILL used to be read as the OOM killer's, which marks the configuration too big for
    memory; the kernel's own count says whether it was."""
    from autotune.measure.runner import oom_kills

    if oom_kills() is None:
        pytest.skip("this kernel has no oom_kill count in /proc/vmstat")
    res = run_window(request(cpu_env, FAULTY + "KilledFromOutside"), tmp_path)
    assert res.signal == "SIGKILL"
    assert res.outcome == "crash", res.error
    assert "not by the OOM killer" in res.error


def test_the_probe_in_the_fork_server_describes_the_device_as_a_fresh_interpreter_does() -> None:
    """The driver probes the device in a child of the trials' fork server (torch imported
    there already); the fresh interpreter's probe is the reference, and a device that is not
    there is the same one-paragraph error."""
    from autotune.core.env import DeviceError, probe
    from autotune.measure.launch import probe_env

    fresh, forked = probe("cpu"), Env.from_dict(probe_env("cpu"))
    assert forked == fresh
    if not torch_cuda_available():
        with pytest.raises(DeviceError) as in_server:
            probe_env("cuda")
        with pytest.raises(DeviceError) as in_fresh:
            probe("cuda")
        assert str(in_server.value) == str(in_fresh.value)
        assert "device=cuda" in str(in_server.value)


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def test_segfaulting_dataloader_worker(cpu_env: Env, tmp_path: Path) -> None:
    since = time.time() - 1
    res = run_window(request(cpu_env, FAULTY + "SegfaultingWorker", knobs={"num_workers": 1, "prefetch_factor": 2}), tmp_path)
    assert res.outcome == "crash"
    assert "DataLoader worker" in res.error, res.error
    assert leftover_trials(since, tmp_path) == []


def test_loader_workers_start_as_in_production(cpu_env: Env, tmp_path: Path) -> None:
    """A trial is a fork-server child; its DataLoader workers must still start the way a
    production run's do (the interpreter's default method; on Linux up to Python 3.13: forked
    from the training process). Through a second fork server each worker start costs seconds,
    at every epoch without persistent_workers, which would skew every num_workers trial."""
    report = tmp_path / "loader-start"
    res = run_window(request(cpu_env, FAULTY + "ReportsLoaderStart", report_file=str(report),
                             knobs={"num_workers": 1, "prefetch_factor": 2}), tmp_path / "t")
    assert res.outcome == "ok", res.stderr_tail
    trial_pid, method = report.read_text().split()
    fresh = subprocess.run([sys.executable, "-c", "import multiprocessing as m; print(m.get_start_method())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert method == fresh
    if method == "fork":
        assert (tmp_path / "loader-start.worker").read_text() == trial_pid


def test_grandchild_is_killed_with_the_trial(cpu_env: Env, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    res = run_window(request(cpu_env, FAULTY + "SpawnsGrandchild", {"timeout_s": 6.0, "stall_s": 60.0},
                             pid_file=str(pid_file)), tmp_path / "t")
    assert res.outcome == "timeout"
    pid = int(pid_file.read_text())
    deadline = time.time() + 5
    while psutil.pid_exists(pid) and time.time() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.1)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert not alive


def test_broken_workload_is_a_crash_with_its_message(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "RaisesInDataset"), tmp_path)
    assert res.outcome == "crash"
    assert "cannot open /data/train" in res.error


def test_memory_peak_is_measured(cpu_env: Env, tmp_path: Path) -> None:
    res = run_window(request(cpu_env, FAULTY + "HoldsMemory", hold_gb=1.0), tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    assert res.peak_memory_gb > 1.0


def test_env_passes_to_child(cpu_env: Env, tmp_path: Path) -> None:
    req = request(cpu_env, "autotune.workloads.mlp.MLPWorkload")
    req.env = {"AUTOTUNE_MARK": "x"}
    assert run_window(req, tmp_path).outcome == "ok"
    assert os.environ.get("AUTOTUNE_MARK") is None


def test_slow_loader_is_stopped_while_its_ceiling_is_measured(cpu_env: Env, tmp_path: Path) -> None:
    """The loader ceiling streams its rate: a loader already far below the best is stopped
    after a few batches, not after the whole measurement (and no ceiling is cached from it)."""
    from autotune.search.pruning import PARTIAL_MIN_BATCHES, partial_verdict
    from tests.workloads_diag import SleepyLoaderWorkload, baseline_knobs, spec

    req = TrialRequest(workload=spec(SleepyLoaderWorkload), device="cpu",
                       knobs=baseline_knobs(SleepyLoaderWorkload()),  # ~100 samples/s alone
                       window={**TINY_WINDOW, "measure_steps": 40, "measure_seconds": 20.0},
                       ceilings={"loader": True})
    seen: list[dict[str, Any]] = []

    def check(watch: Any) -> str | None:
        seen.append(dict(watch.partial))
        return partial_verdict(watch.partial, best=10_000.0)

    res = run_window(req, tmp_path, on_progress=check)
    assert res.outcome == "pruned", (res.outcome, res.error)
    assert "so far" in res.error and "under 50%" in res.error
    assert res.ceilings == {}  # stopped mid-measurement: nothing to cache
    assert max(p.get("batches", 0) for p in seen) < 40
    assert any(p.get("batches", 0) >= PARTIAL_MIN_BATCHES for p in seen)
    assert partial_verdict({"kind": "loader", "rate": 80.0, "batches": 5}, best=100.0) is None
    assert partial_verdict({"kind": "loader", "rate": 10.0, "batches": 2}, best=100.0) is None


def test_short_steps_are_measured_for_min_measure_seconds(cpu_env: Env, tmp_path: Path) -> None:
    """Six ~1 ms steps are too few batches for a stable figure: the window goes on past
    measure_steps until min_measure_seconds have been measured (and stays within bounds)."""
    req = request(cpu_env, "autotune.workloads.mlp.MLPWorkload",
                  {"measure_steps": 6, "min_measure_seconds": 1.0, "measure_seconds": 30.0})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    assert res.measure_s >= 1.0 and res.steps > 6
    assert len(res.chunks) < 6 + res.steps // 6  # longer chunks past the nominal window
    # ...and no chunk the pruner reads is shorter than 1/8 of the minimum window: a couple of
    # millisecond steps are too noisy to condemn a trial on.
    assert len(res.chunks) <= res.measure_s / (1.0 / 8) + 1, (len(res.chunks), res.measure_s)


def test_a_raising_progress_callback_does_not_leave_the_trial_running(cpu_env: Env,
                                                                      tmp_path: Path) -> None:
    """A fault in the driver's own callback (a pruning bug, a storage error) reaches the
    caller, and the window it was watching dies with it: an orphaned trial would hold its
    worker's exit (and its RUNNING trial) open while other workers wait on it."""
    since = time.time() - 1

    def broken(watch: Any) -> str | None:
        raise RuntimeError("bug in the driver")

    with pytest.raises(RuntimeError, match="bug in the driver"):
        run_window(request(cpu_env, "autotune.workloads.mlp.MLPWorkload", {"measure_seconds": 30.0,
                                                                  "min_measure_seconds": 30.0}),
                   tmp_path, on_progress=broken)
    assert leftover_trials(since, tmp_path) == []


def test_a_compiling_trial_is_not_taken_for_a_hung_one(cpu_env: Env, tmp_path: Path) -> None:
    """A cold torch.compile is silent for longer than stall_s (max-autotune: minutes); the
    compile allowance covers the build and first step, so the trial is measured, not killed.
    The silence is made by the workload (its tracing sleeps 10 s), not by this machine's
    compile speed: a fast machine compiles the mlp in about a second. (A second run without
    the allowance would have to stall in the compile, not in a start-up that a loaded machine
    stretched past stall_s: measured at over 4 s beside stress-ng.)"""
    window = {"stall_s": 5.0, "compile_timeout_s": 300.0, "timeout_s": 300.0}
    req = request(cpu_env, FAULTY + "SlowToCompile", window, knobs={"compile": "default"},
                  trace_sleep_s=10.0)
    req.env = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}  # a cold compile, every run
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", (res.outcome, res.error)
    # The first step (no heartbeat from its start to its end) was silent past stall_s, and
    # the trial was measured all the same: the allowance covered it.
    assert res.compile_s > 5.0, res.compile_s
    assert res.steps >= TINY_WINDOW["min_measure_steps"] and res.samples_per_sec > 0


def test_a_numerics_run_slower_than_stall_s_is_not_taken_for_a_hung_one(cpu_env: Env,
                                                                        tmp_path: Path) -> None:
    """A numerics run's steps beat the watchdog as a window's do: five 2 s steps (a loader
    that sleeps 250 ms an item, 8 a batch) past a 4 s stall limit record their losses. Without
    the beats a GPT study's fp32 reference at batch 64 ended as stalled and its finalist was
    exported unchecked (2026-12-06)."""
    from tests.workloads_diag import SleepyLoaderWorkload, baseline_knobs, spec

    req = TrialRequest(workload=spec(SleepyLoaderWorkload, sleep_ms=250.0), device="cpu",
                       knobs=baseline_knobs(SleepyLoaderWorkload()), numerics_steps=5,
                       window={**TINY_WINDOW, "stall_s": 4.0, "timeout_s": 120.0})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", (res.outcome, res.error)
    assert len(res.losses) == 5 and all(math.isfinite(v) for v in res.losses)


def test_the_pruner_reads_the_throughput_so_far(cpu_env: Env, tmp_path: Path) -> None:
    """What the pruner reads at each chunk edge is the window's throughput from its start:
    one stalled stretch in a healthy trial lowers it a little for the rest of the window,
    instead of showing one chunk at a fraction of the trial's speed. The last edge is the
    window's own figure."""
    # 16 steps in 2-step chunks: at least 8 edges even where a loaded machine stretches a
    # step to 250 ms (seen beside stress-ng), and 1.5 s of ~0.2 s chunks where it does not.
    req = request(cpu_env, FAULTY + "OneHiccup",
                  {"measure_steps": 16, "min_measure_seconds": 1.5, "measure_seconds": 30.0})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", res.stderr_tail
    assert res.measure_s > 1.5 and len(res.chunks) >= 4
    assert res.chunks[-1] == pytest.approx(res.samples_per_sec, rel=0.05)
    # The 0.4 s stall ~0.8 s in: a 0.2 s chunk around it ran at a third of the trial's speed,
    # which would read "under half" against this very trial as the best. So far, it does not.
    assert min(res.chunks) > 0.5 * res.samples_per_sec, (res.chunks, res.samples_per_sec)
