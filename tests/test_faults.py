"""The fault-injection suite: each fault is made real on the CPU, inside a real study run by the
real CLI. After each: the study loads, no trial is RUNNING, no process is left behind, and the
trial's reason says what happened."""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.conftest import BARE_ARGS, leftover_trials, run_cli

F = "workload._target_=tests.workloads_faulty."


def run_fault(tmp_path: Path, args: list[str], name: str = "fault") -> optuna.trial.FrozenTrial:
    since = time.time() - 1
    # A fault that ends the trial by itself needs no tight limit: a generous one is only a
    # safety net, and a child slow to start on a loaded machine is not taken for a hang.
    limits = [] if any(a.startswith("window.stall_s") for a in args) else [
        "window.stall_s=60", "window.timeout_s=120"]
    proc = run_cli([*args, "device=cpu", f"study.name={name}", "study.n_trials=1", *BARE_ARGS,
                    *limits], tmp_path, timeout=300)
    # A study that exports nothing (its one trial failed) exits non-zero.
    exported = (tmp_path / "studies" / name / "best.yaml").exists()
    assert proc.returncode == (0 if exported else 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    study = optuna.load_study(study_name=name,
                              storage=f"sqlite:///{tmp_path}/studies/{name}/study.db")
    trials = study.get_trials()
    assert len(trials) == 1 and not [t for t in trials if t.state == TrialState.RUNNING]
    time.sleep(0.5)
    assert leftover_trials(since, tmp_path) == []
    return trials[0]


# Hangs are declared after 5 s of silence: whether the child got as far as its hang or was
# still starting on a loaded machine, the outcome and reason are the same (10 s cost each of
# the four hangs 16-18 s on 2 cores).
HANG = "window.stall_s=5"


@pytest.mark.parametrize(
    "args,state,outcome,reason",
    [
        ([F + "RaisesOOM"], TrialState.COMPLETE, "oom", "out of memory"),
        ([F + "HangingStep", HANG], TrialState.FAIL, "stalled", "no progress"),
        ([F + "HangingLoader", "knobs.num_workers=2", HANG], TrialState.FAIL, "stalled", "no progress"),
        ([F + "HangingLoader", "knobs.num_workers=0", HANG], TrialState.FAIL, "stalled", "no progress"),
        # torch notices a dead worker on its own status poll (every 5 s): give it the time.
        ([F + "SegfaultingWorker", "knobs.num_workers=1", "window.stall_s=40"], TrialState.FAIL,
         "crash", "DataLoader worker"),
        ([F + "SegfaultingStep"], TrialState.FAIL, "crash", "SIGSEGV"),
        ([F + "SpawnsGrandchild", "+workload.pid_file=gc.pid", HANG], TrialState.FAIL, "stalled", "no progress"),
        ([F + "NaNLoss"], TrialState.FAIL, "nan", "loss is nan"),
        ([F + "RaisesInDataset"], TrialState.FAIL, "crash", "cannot open /data/train"),
    ],
    ids=["oom", "hung-step", "hung-worker", "hung-loader", "segfault-worker", "segfault-step",
         "grandchild", "nan", "raising-workload"],
)
def test_fault_is_survived(tmp_path: Path, args: list[str], state: TrialState, outcome: str,
                           reason: str) -> None:
    trial = run_fault(tmp_path, args)
    assert trial.state == state
    assert trial.user_attrs["outcome"] == outcome
    assert reason in trial.user_attrs["reason"], trial.user_attrs["reason"]
    if outcome == "oom":  # infeasible, not failed: the sampler learns the memory boundary
        assert trial.constraints and all(v > 0 for v in trial.constraints.values())
        assert not (tmp_path / "studies" / "fault" / "best.yaml").exists()
    if outcome in ("crash", "stalled"):
        assert trial.user_attrs["stderr_tail"] or trial.user_attrs.get("signal") or outcome == "stalled"


def test_over_the_memory_limit_is_infeasible_never_best(tmp_path: Path) -> None:
    trial = run_fault(tmp_path, [F + "HoldsMemory", "+workload.hold_gb=1.5", "memory.limit_gb=1.0"])
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["outcome"] == "ok"
    assert trial.user_attrs["peak_memory_gb"] > 1.5
    assert trial.constraints["peak_memory_gb"] == pytest.approx(
        trial.user_attrs["peak_memory_gb"] - 1.0)
    assert not (tmp_path / "studies" / "fault" / "best.yaml").exists()
    assert "False" in (tmp_path / "studies" / "fault" / "trials.csv").read_text()


@pytest.mark.slow
def test_recompile_limit_fallback_is_flagged(tmp_path: Path) -> None:
    trial = run_fault(tmp_path, [F + "Recompiles", "knobs.compile=default", "window.stall_s=200",
                                 "window.timeout_s=300"])
    assert trial.user_attrs["outcome"] == "compile_fallback", trial.user_attrs["reason"]
    assert "recompile_limit" in trial.user_attrs["reason"]
    assert trial.state == TrialState.FAIL


def test_torn_journal_is_repaired_and_resumed(tmp_path: Path) -> None:
    journal = tmp_path / "j.log"
    args = ["workload=mlp", "device=cpu", "study.name=torn", f"study.storage=journal:{journal}",
            "study.prune=false", "study.agent=false",
            *BARE_ARGS]
    assert run_cli([*args, "study.n_trials=1"], tmp_path).returncode == 0
    good = journal.read_bytes()
    with journal.open("ab") as f:  # a writer killed mid-record
        f.write(b'{"op_code": 5, "worker_id": "x", "trial_id": 0, "us')
    proc = run_cli([*args, "study.n_trials=1"], tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "torn record" in proc.stdout + proc.stderr
    assert journal.read_bytes().startswith(good)
    from autotune.results.storage import open_storage

    trials = optuna.load_study(study_name="torn", storage=open_storage(f"journal:{journal}")).get_trials()
    # One trial a run; the same-training answer's trial where a run's best changes training.
    searched = [t for t in trials if t.user_attrs.get("source") != "same_training"]
    assert [t.state for t in searched] == [TrialState.COMPLETE, TrialState.COMPLETE]


def test_interrupted_export_keeps_the_previous_file(tmp_path: Path) -> None:
    from autotune.core.files import atomic_write

    path = tmp_path / "best.yaml"
    atomic_write(path, yaml.safe_dump({"speedup": 2.0}))
    with pytest.raises(UnicodeEncodeError):
        atomic_write(path, "speedup: 3.0\n" + "\ud800")  # the write fails half-way
    assert yaml.safe_load(path.read_text()) == {"speedup": 2.0}
    assert [p.name for p in tmp_path.iterdir()] == ["best.yaml"]


def test_refused_connection_loses_nothing(tmp_path: Path) -> None:
    ok = run_cli(["workload=mlp", "device=cpu", "study.name=keep", "study.n_trials=1", *BARE_ARGS],
                 tmp_path)
    assert ok.returncode == 0
    before = (tmp_path / "studies" / "keep" / "best.yaml").read_text()
    bad = run_cli(["workload=mlp", "device=cpu", "study.name=keep",
                   "study.storage=postgresql+psycopg://u:pw@127.0.0.1:9/x"], tmp_path)
    assert bad.returncode == 2 and "127.0.0.1" in bad.stderr and "pw@" not in bad.stderr
    assert (tmp_path / "studies" / "keep" / "best.yaml").read_text() == before


