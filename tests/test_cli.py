"""The command a user types: errors are one clear paragraph with exit code 2; a study runs,
exports, and resumes after the driver is killed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
import yaml

import autotune
from tests.conftest import BARE_ARGS, TINY_ARGS, child_env, ran_to_the_end, run_cli


def assert_usage_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    err = proc.stderr
    assert "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


def test_unknown_key_names_the_key(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "study.n_trails=3"], tmp_path)
    assert_usage_error(proc, "n_trails", "study")


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "study.n_trials=many"], tmp_path)
    assert_usage_error(proc, "n_trials", "many")


def test_unknown_workload_lists_valid_choices(tmp_path: Path) -> None:
    proc = run_cli(["workload=resnet50"], tmp_path)
    assert_usage_error(proc, "resnet50", "gpt", "mlp", "resnet18", "_target_")


def test_bad_target_is_explained(tmp_path: Path) -> None:
    proc = run_cli(["workload._target_=nowhere.Thing"], tmp_path)
    assert_usage_error(proc, "nowhere", "importing module")
    proc = run_cli(["workload=mlp", "+workload.colour=red"], tmp_path)
    assert_usage_error(proc, "colour", "Valid arguments", "hidden")


def test_workload_that_raises_when_built(tmp_path: Path) -> None:
    proc = run_cli(["workload._target_=tests.workloads_faulty.RaisesOnBuild"], tmp_path)
    assert_usage_error(proc, "RaisesOnBuild", "cannot open /data/train")
    assert not (tmp_path / "studies").exists() or not list((tmp_path / "studies").rglob("study.db"))


def test_knob_invalid_on_this_device(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "device=cpu", "knobs.cuda_graphs=true"], tmp_path)
    assert_usage_error(proc, "knobs.cuda_graphs", "CUDA")


def test_sqlite_refuses_many_workers(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "device=cpu", "workers=2"], tmp_path)
    assert_usage_error(proc, "SQLite", "PostgreSQL", "journal")


def test_dead_storage_names_host_not_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://tuner:s3cretSENTINEL@127.0.0.1:9/nightly"
    proc = run_cli(["workload=mlp", "device=cpu", f"study.storage={url}"], tmp_path, timeout=120)
    assert_usage_error(proc, "127.0.0.1", "No study data")
    assert "s3cretSENTINEL" not in proc.stderr + proc.stdout


def test_storage_without_its_driver_says_what_to_install(tmp_path: Path) -> None:
    """A URL whose driver module is missing is not a server that does not answer: the message
    names the module and what to install, not the server to check."""
    url = "postgresql+psycopg2://tuner:s3cretSENTINEL@127.0.0.1:9/nightly"  # psycopg 2: absent
    proc = run_cli(["workload=mlp", "device=cpu", f"study.storage={url}"], tmp_path, timeout=120)
    assert_usage_error(proc, "driver is not installed", "'psycopg2'", "autotune[postgres]",
                       "postgresql+psycopg://", "No study data")
    assert "server is running" not in proc.stderr
    assert "s3cretSENTINEL" not in proc.stderr + proc.stdout


def test_the_header_names_the_cpu_defaults_a_run_took() -> None:
    """The CPU-sized defaults apply to the keys a user did not set, and the header says which:
    a run given study.n_trials is not told its trials were defaulted."""
    from autotune.cli.app import cpu_defaults_words
    from autotune.cli.compose import compose_config

    assert cpu_defaults_words(compose_config([]), "cpu") == (
        "CPU run: a CPU-sized window (window.* not set) and 12 trials (study.n_trials not set)")
    some = compose_config(["study.n_trials=1", "window.measure_steps=8", "window.warmup_steps=1",
                           "window.min_measure_steps=2"])
    assert cpu_defaults_words(some, "cpu") == (
        "CPU run: CPU-sized window.measure_seconds=5.0, window.profile_steps=2 (not set)")
    every = compose_config(["study.n_trials=3", *(f"window.{k}=1" for k in (
        "warmup_steps", "measure_steps", "measure_seconds", "min_measure_steps",
        "profile_steps"))])
    assert cpu_defaults_words(every, "cpu") is None
    assert cpu_defaults_words(compose_config([]), "cuda") is None


def test_study_exports_and_round_trips(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "device=cpu", "study.n_trials=3", "study.name=e2e", *TINY_ARGS],
                   tmp_path)
    assert ran_to_the_end(proc.returncode, proc.stdout + proc.stderr), proc.stderr[-3000:]
    out = tmp_path / "studies" / "e2e"
    doc = yaml.safe_load((out / "best.yaml").read_text())
    assert doc["schema"] == 1 and doc["speedup"] is not None
    assert set(doc) >= {"workload", "device", "knobs", "metrics", "baseline", "speedup", "study"}
    assert doc["metrics"]["samples_per_sec"] > 0
    assert doc["study"]["trials"] == 3
    from autotune.core.env import cpu_model

    assert doc["device"]["name"] == (cpu_model() or doc["device"]["name"])  # which processor
    for name in ("best.yaml", "trials.csv"):  # the team can read them, as any file it writes
        assert (out / name).stat().st_mode & 0o044 == 0o044 & ~_umask(), name
    best = autotune.load_best(out / "best.yaml")
    assert best.knobs == doc["knobs"]
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 3 and rows[0]["source"] == "baseline"
    assert "speedup" in proc.stdout
    # The exported knobs drive a real training run through the same code.
    from autotune.workloads.mlp import MLPWorkload

    run = autotune.Training(MLPWorkload(n_samples=256), best.knobs, "cpu")
    inputs, targets = next(iter(run.loader))
    assert run.step(*run.to_device(inputs, targets)).isfinite()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _study(tmp_path: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/studies/{name}/study.db")


def _all_gone(pids: list[int], within_s: float) -> bool:
    deadline = time.time() + within_s
    while time.time() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


def test_resume_after_sigkill(tmp_path: Path) -> None:
    # No pruning: the re-run of the lost trial must run its whole window, whatever the load.
    args = ["workload._target_=tests.workloads_faulty.SlowStep", "+workload.sleep_ms=400",
            "device=cpu", "study.name=killed", "study.n_trials=3", "study.prune=false", *BARE_ARGS,
            "window.measure_steps=8", "window.measure_seconds=30"]
    env = child_env()
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen([sys.executable, "-c", "from autotune.cli.main import main; main()", *args],
                                  cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    # Wait on the second trial's heartbeat file, not on the database: reading an SQLite study
    # while the driver is still creating its schema races with that creation.
    beat = tmp_path / "studies" / "killed" / "trials" / "1" / "progress.json"
    deadline = time.time() + 240
    while time.time() < deadline and not beat.exists() and driver.poll() is None:
        time.sleep(0.5)
    trials = _study(tmp_path, "killed").get_trials() if beat.exists() else []
    running = next((t for t in trials if t.state == optuna.trial.TrialState.RUNNING), None)
    assert running is not None, f"no second trial started; the driver printed:\n{log.read_text()[-3000:]}"
    window_pids = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert _all_gone(window_pids, within_s=10), "the window outlived its SIGKILLed driver"

    before = {t.number: t.state for t in _study(tmp_path, "killed").get_trials()}
    proc = run_cli(args[:-3] + [*BARE_ARGS, "study.n_trials=2"], tmp_path)
    assert ran_to_the_end(proc.returncode, proc.stdout + proc.stderr), proc.stderr[-3000:]
    study = _study(tmp_path, "killed")
    trials = study.get_trials()
    lost = trials[running.number]
    assert lost.state == optuna.trial.TrialState.FAIL
    assert lost.user_attrs["outcome"] == "driver_lost"
    requeued = [t for t in trials if t.user_attrs.get("requeue_of") == running.number]
    assert len(requeued) == 1 and requeued[0].params == running.params
    assert requeued[0].state == optuna.trial.TrialState.COMPLETE
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    for number, state in before.items():  # finished trials are kept, not repeated
        if state.is_finished() and number != running.number:
            assert trials[number].state == state
    rows = list(csv.DictReader((tmp_path / "studies" / "killed" / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == [t.number for t in trials]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_end_the_trial_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    args = ["workload._target_=tests.workloads_faulty.SlowStep", "+workload.sleep_ms=400",
            "device=cpu", "study.name=intr", "study.n_trials=2", *TINY_ARGS,
            "window.measure_steps=30", "window.measure_seconds=60"]
    env = child_env()
    driver = subprocess.Popen([sys.executable, "-c", "from autotune.cli.main import main; main()", *args],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = tmp_path / "studies" / "intr" / "trials" / "0" / "progress.json"
    deadline = time.time() + 120
    while not progress.exists() and time.time() < deadline:
        time.sleep(0.2)
    children = [p.pid for p in psutil.Process(driver.pid).children(recursive=True)]
    driver.send_signal(sig)
    err, _ = driver.communicate(timeout=60)
    assert driver.returncode == (130 if sig == signal.SIGINT else 143), err[-2000:]
    assert "resume" in err
    assert _all_gone(children, within_s=10)
    t0 = _study(tmp_path, "intr").get_trials()[0]
    assert t0.state == optuna.trial.TrialState.FAIL and t0.user_attrs["outcome"] == "interrupted"
