"""A window states the load it saw: beside a real CPU hog it is contended, with the hog's
share named; on a quiet machine it is not; a GPU reading without NVML is a clean "not
available"."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.measure.contention import between, snapshot
from autotune.measure.nvml import GpuReader, gpu_between
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_WINDOW

HOG_PY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


@contextmanager
def cpu_hog(seconds: float = 120, workers: int | None = None) -> Iterator[None]:
    """As many busy processes as the machine has cores (stress-ng where installed, CI installs
    it; else Python busy loops), started through a shell that exits at once, so the hog is
    nobody's child here: another user's job, not part of the measured process tree.

    Why every core: one busy process beside a two-thread trial on two cores got 0.49 of a core
    in CI (the trial took 1.48), a hair under the 25% threshold; the tests assert that a load
    is seen, not where the scheduler splits one core; with a hog on every core the trial's
    fair share is about half the machine, twice the threshold."""
    n = workers or os.cpu_count() or 1
    if shutil.which("stress-ng"):
        cmd = f"stress-ng --cpu {n} --timeout {int(seconds)}s --quiet >/dev/null 2>&1 &"
    else:
        one = f"{shlex.quote(sys.executable)} -c {shlex.quote(HOG_PY.format(s=seconds))}"
        cmd = " ".join([f"{one} >/dev/null 2>&1 &"] * n)
    shell = subprocess.Popen(["sh", "-c", cmd], start_new_session=True)
    shell.wait()
    try:
        time.sleep(1.0)  # let it start spinning
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)


def _work(seconds: float) -> None:
    """What a CPU trial does: matmuls on torch's intra-op threads (one per core)."""
    a = torch.randn(256, 256)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = torch.tanh(a @ a)


def _measure(seconds: float = 3.0) -> dict:
    start = snapshot()
    _work(seconds)
    return between(start, snapshot())


def _machine_is_quiet() -> bool:
    """Nothing else ran on the machine over a second: the quiet-machine assertion holds only
    then (a test that fails because CI is busy would be a bug of its own)."""
    a = snapshot()
    time.sleep(1.0)
    return between(a, snapshot()).get("other_cpu_cores", 0.0) < 0.2


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")
def test_a_window_beside_a_cpu_hog_is_contended_and_names_the_load() -> None:
    if (os.cpu_count() or 1) > 8:
        pytest.skip("one busy core is under the contention threshold on a large machine")
    with cpu_hog():
        load = _measure()
    assert load["contended"], load
    assert load["other_cpu_cores"] >= 0.5
    assert load["runqueue_wait_share"] > 0.0
    assert any("other processes used" in r for r in load["reasons"]), load["reasons"]


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")
def test_a_window_on_a_quiet_machine_is_not_contended() -> None:
    if not _machine_is_quiet():
        pytest.skip("the machine is busy with other work: no quiet reading can be taken")
    load = _measure()
    if load["other_cpu_cores"] >= 0.2:
        pytest.skip(f"other work started during the reading ({load['other_cpu_cores']} cores)")
    assert not load["contended"], load
    assert "reasons" not in load


def test_a_real_trial_window_beside_a_hog_records_its_contention(tmp_path: Path,
                                                                cpu_env: Env) -> None:
    """The trial process itself takes the readings and hands them back in its WindowResult."""
    knobs = build_space(cpu_env, MLPWorkload(), {}).baseline
    req = TrialRequest(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"},
                       knobs=knobs, device="cpu",
                       window={**TINY_WINDOW, "measure_steps": 400, "measure_seconds": 4.0})
    with cpu_hog():
        result = run_window(req, tmp_path / "w")
    assert result.ok, result.error
    assert result.contention["contended"], result.contention
    assert result.contention["other_cpu_cores"] >= 0.5


def test_without_nvml_a_gpu_reading_is_a_clean_not_available() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: see the gpu-marked test")
    reader = GpuReader(0)
    assert not reader.available
    assert reader.reason.startswith("NVML not available")
    reading = reader.read()
    assert reading == {"available": False, "reason": reader.reason}
    figures, reasons = gpu_between(reading, reader.read(), 1.0)
    assert reasons == []
    # and a window snapshot with that reader carries it without failing, and names no GPU
    # reason (the CPU's own load may still call it contended on a busy machine: not asserted)
    load = between(snapshot(reader), snapshot(reader))
    assert load["gpu"] == {"available": False, "reason": reader.reason}
    assert not any("GPU" in r for r in load.get("reasons", []))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nvml_readings_are_taken_on_a_gpu() -> None:
    reader = GpuReader(0)
    assert reader.available, reader.reason
    a = reader.read()
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
    b = reader.read()
    figures, _ = gpu_between(a, b, 1.0)
    assert a["sm_clock_max_mhz"] and b["sm_clock_mhz"] is not None
    assert "utilization_pct" in b and "others" in b
    assert figures, figures


def test_a_contended_window_is_measured_again_and_keeps_its_earlier_reading(
        tmp_path: Path, cpu_env: Env) -> None:
    """The driver re-measures a window taken beside a hog after a short wait; a hog that stays
    leaves the last reading, contended, with the earlier one kept beside it."""
    from autotune.search.contended import measure_settled

    knobs = build_space(cpu_env, MLPWorkload(), {}).baseline
    req = TrialRequest(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"},
                       knobs=knobs, device="cpu",
                       window={**TINY_WINDOW, "measure_steps": 400, "measure_seconds": 3.0})
    with cpu_hog():
        result = measure_settled(lambda r, d: run_window(r, d), req, tmp_path / "w", "trial 0",
                                 lambda: None, retries=1, wait_s=0.5)
    assert result.ok and result.contention["contended"], result.contention
    earlier = result.contention["earlier"]
    assert len(earlier) == 1 and earlier[0]["samples_per_sec"] > 0
    assert any("other processes used" in r for r in earlier[0]["reasons"])


def test_a_chunk_read_under_contention_never_prunes(tmp_path: Path) -> None:
    """Far below the best, a chunk prunes the trial; the same chunk read while other processes
    held the cores does not (nor does it count against the trial later)."""
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig
    from autotune.measure.runner import Watch
    from autotune.results.record import set_trial_attrs
    from autotune.search.loop.driver import Driver

    window = {**TINY_WINDOW, "profile": False}
    cfg = Config(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False),
                 window=WindowConfig(**window))
    setup = build_setup(cfg, [f"window.{k}={v}" for k, v in window.items()])[0]
    driver = Driver(setup)
    driver.prepare()
    assert driver.run(1) == 1
    best = driver.study.best_value
    trial = driver.study.ask()
    set_trial_attrs(trial, {"knobs": setup.space.baseline})
    check = driver.pruning_check(trial)
    assert check is not None
    slow = [best / 100]
    assert check(Watch(stage="measure", chunks=slow, contended=True)) is None
    # Chunks read less than an epoch after workers restarted are not pruned on; once the
    # window is past that, the same chunks are (no new one needed).
    assert check(Watch(stage="measure", chunks=slow, restarting=True)) is None
    assert "under half the best" in (check(Watch(stage="measure", chunks=slow)) or "")
    # the same trial's window measured again reads its chunks from step 0 once more: each step
    # is told to Optuna once (it would keep the first value and warn on every repeat)
    import warnings

    again = driver.pruning_check(trial)
    assert again is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "under half the best" in (again(Watch(stage="measure", chunks=slow)) or "")
    assert not [w for w in caught if "already reported" in str(w.message)], caught


def test_remeasure_contended_0_takes_a_busy_window_once_with_its_load_named(
        tmp_path: Path) -> None:
    """study.remeasure_contended=0 (a GPU shared on purpose): a trial's window taken beside a
    hog is measured once, not again after a wait, and says it was contended."""
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig
    from autotune.search.loop.driver import Driver

    window = {**TINY_WINDOW, "measure_steps": 400, "measure_seconds": 3.0}
    cfg = Config(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False,
                                   remeasure_contended=0),
                 window=WindowConfig(**window))
    setup = build_setup(cfg, [f"window.{k}={v}" for k, v in window.items()])[0]
    assert setup.study.remeasure_contended == 0
    driver = Driver(setup)
    driver.prepare()
    with cpu_hog():
        assert driver.run(1) == 1
    contention = driver.study.trials[0].user_attrs["contention"]
    assert contention["contended"], contention
    assert "earlier" not in contention, contention


def test_a_machine_that_stays_busy_is_not_waited_for_trial_after_trial() -> None:
    """Two trials whose windows stayed contended through their re-measurements: the load is
    not passing, so the next windows are taken once (their load named) until one is quiet."""
    from autotune.measure.protocol import WindowResult
    from autotune.search.contended import BusyMachine

    busy = WindowResult(outcome="ok", contention={"contended": True})
    quiet = WindowResult(outcome="ok", contention={"contended": False})
    failed = WindowResult(outcome="crash")
    machine = BusyMachine()
    assert machine.retries(2) == 2
    machine.saw(busy)
    machine.saw(failed)  # a failed trial says nothing about the load
    assert machine.retries(2) == 2
    machine.saw(busy)
    assert machine.retries(2) == 0 and machine.retries(2) == 0
    machine.saw(quiet)
    assert machine.retries(2) == 2


def test_a_windows_nvml_readings_reach_trials_csv(tmp_path: Path) -> None:
    """What NVML read over a window (utilization, SM clock, power, other processes, clock
    events) is a trials.csv column per figure, so a user sees each window's GPU beside its
    speed; a machine without NVML gets one column saying so, not empty figures."""
    import csv

    import optuna

    from autotune.results.export import write_exports
    from autotune.results.record import set_trial_attrs

    start = {"available": True, "utilization_pct": 0, "sm_clock_mhz": 345,
             "sm_clock_max_mhz": 1980, "clock_events": 0x1, "energy_mj": 1_000_000,
             "temperature_c": 31, "others": {"count": 0, "memory_gb": 0.0}}
    end = {**start, "utilization_pct": 97, "sm_clock_mhz": 1980, "clock_events": 0x4,
           "energy_mj": 1_700_000, "temperature_c": 44}
    gpu, reasons = gpu_between(start, end, 2.0)
    assert reasons == []
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    for contention in ({"contended": False, "gpu": gpu},
                       {"contended": False, "gpu": {"available": False, "reason": "no NVML"}}):
        trial = study.ask()
        set_trial_attrs(trial, {"knobs": {}, "outcome": "ok", "samples_per_sec": 10.0,
                                "contention": contention})
        study.tell(trial, 10.0)
    write_exports(study, tmp_path, f"sqlite:///{tmp_path / 's.db'}")
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert rows[0]["gpu.utilization_pct"] == "97"
    assert rows[0]["gpu.sm_clock_mhz"] == "1980" and rows[0]["gpu.sm_clock_max_mhz"] == "1980"
    assert rows[0]["gpu.power_w"] == "350.0" and rows[0]["gpu.energy_j"] == "700.0"
    assert rows[0]["gpu.other_processes"] == "0"
    assert rows[0]["gpu.clock_events"] == "GpuIdle SwPowerCap"
    assert rows[1]["gpu.available"] == "False" and rows[1]["gpu.utilization_pct"] == ""


def test_a_remeasured_compiled_trial_keeps_its_first_windows_cold_compile(tmp_path: Path) -> None:
    """The first window compiled cold (a cache miss, 30 s) and filled the study's inductor
    cache; beside a load it was measured again, and that window compiled warm (hits only,
    0.9 s). The trial's compile is what a run pays, the cold one; the throughput is the
    re-measured window's. The windows are served as stored results (the strategies
    benchmark's way), so the rule is tested apart from how long compiles take."""
    from autotune.measure.protocol import WindowResult
    from autotune.search.contended import measure_settled

    def window(rate: float, compile_s: float, cache: dict[str, int], busy: bool) -> WindowResult:
        return WindowResult(outcome="ok", samples_per_sec=rate, compile_s=compile_s,
                            compile_cache=cache, contention={"contended": busy, "reasons": []})

    served = iter([window(400.0, 30.0, {"hits": 0, "misses": 2}, True),
                   window(900.0, 0.9, {"hits": 2, "misses": 0}, False)])
    req = TrialRequest(workload={}, knobs={"compile": "default"}, device="cpu", window={})
    result = measure_settled(lambda r, d: next(served), req, tmp_path, "trial 1", lambda: None,
                             retries=1, wait_s=0.0)
    assert result.samples_per_sec == 900.0
    assert result.compile_s == 30.0 and result.compile_cache == {"hits": 0, "misses": 2}
    assert result.contention["remeasured_compile_s"] == 0.9
    assert len(result.contention["earlier"]) == 1

    eager = iter([window(400.0, 0.0, {}, True), window(900.0, 0.0, {}, False)])
    result = measure_settled(lambda r, d: next(eager), req, tmp_path, "trial 0", lambda: None,
                             retries=1, wait_s=0.0)
    assert "remeasured_compile_s" not in result.contention and result.compile_cache == {}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_window_pinned_to_one_core_counts_others_over_the_machine() -> None:
    """A rank runs pinned to its share of the node while other processes are counted over all
    of it: the reading keeps both, and the study's load statement names the machine's cores
    (a 2-rank study on 2 cores said "0.6 of 1 cores", 2026-11-28)."""
    from autotune.results.trust import load_statement

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        with cpu_hog():
            load = _measure(2.0)
    finally:
        os.sched_setaffinity(0, before)
    assert load["cpus"] == 1 and load["machine_cpus"] == os.cpu_count(), load
    said = load_statement([{**load, "contended": True}]) or ""
    assert f" of {os.cpu_count()} cores during 1 of 1 windows" in said, said


#: One rank of a two-rank run under torchrun: 3 s of matmuls on one thread, the machine's load
#: read over them as a production run's meter reads it, written per rank.
RANK_PY = """
import json, os, sys, time
import torch
from autotune.measure.contention import between, snapshot, tree_root
torch.set_num_threads(1)
a = torch.randn(256, 256)
start = snapshot()
end = time.monotonic() + 3.0
while time.monotonic() < end:
    a = torch.tanh(a @ a)
load = {**between(start, snapshot()), "root": tree_root(), "launcher": os.getppid()}
with open(os.path.join(sys.argv[1], "load%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(load, f)
"""


@pytest.mark.skipif(not Path("/proc/stat").exists() or (os.cpu_count() or 1) < 2,
                    reason="needs Linux /proc and two cores")
def test_a_rank_under_torchrun_reads_its_sibling_ranks_as_its_own_run(tmp_path: Path) -> None:
    """A production run of 2 ranks under torchrun (autotune verify --nproc-per-node 2, or the
    meter in the user's own run): each rank's reading counts the launcher's whole tree as the
    run's own, so a busy sibling rank is not read as another job beside it."""
    from tests.conftest import child_env

    if not _machine_is_quiet():
        pytest.skip("the machine is busy with other work: no quiet reading can be taken")
    (tmp_path / "rank.py").write_text(RANK_PY)
    outside = snapshot()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(tmp_path / "rank.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=child_env())
    machine = between(outside, snapshot())  # this test's tree holds torchrun and its ranks
    assert proc.returncode == 0, proc.stderr[-2000:]
    if machine["other_cpu_cores"] >= 0.3:
        pytest.skip(f"other work ran beside the ranks ({machine['other_cpu_cores']} cores)")
    for rank in (0, 1):
        load = json.loads((tmp_path / f"load{rank}.json").read_text())
        assert load["root"] == load["launcher"], load
        # The sibling's ~1 core is the run's own, not another job's.
        assert load["other_cpu_cores"] < 0.5 and not load["contended"], load
