"""Many workers on one study, on a real PostgreSQL server (and the journal file storage)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from autotune.search.loop.ownership import owner_alive
from tests.conftest import BARE_ARGS, PG_PASSWORD, child_env, ran_to_the_end, run_cli

WORKER = [sys.executable, "-c", "from autotune.cli.main import main; main()"]


def _spawn(args: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    # Its own temporary directory, inside what _no_secret reads: what the study leaves there
    # (worker hand-offs once did, password included) is checked too.
    (cwd / "tmp").mkdir(exist_ok=True)
    env = child_env(TMPDIR=str(cwd / "tmp"))
    return subprocess.Popen([*WORKER, *args], cwd=cwd, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)


def _check_study(url: str, name: str, expect: int) -> list[optuna.trial.FrozenTrial]:
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    finished = [t for t in trials if t.state.is_finished()]
    # Each invocation may measure one more trial after its search, the same-training answer's
    # (search/loop/same_training.py), when its best changes what is trained: the search's are counted.
    searched = [t for t in finished if t.user_attrs.get("source") != "same_training"]
    assert len(searched) == expect, [(t.number, t.state, t.user_attrs.get("reason")) for t in trials]
    assert len({t.number for t in trials}) == len(trials)
    # No configuration was measured twice: a repeat is a recorded copy of the first.
    measured = [tuple(sorted(t.user_attrs["knobs"].items())) for t in finished
                if "duplicate_of" not in t.user_attrs and t.user_attrs.get("source") != "requeue"]
    assert len(measured) == len(set(measured))
    return searched


def _running_trial_of(proc: psutil.Process) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs={
        "owner_host": socket.gethostname(), "owner_pid": proc.pid,
        "owner_start": round(proc.create_time(), 3)})


def test_an_exited_unreaped_driver_counts_as_dead() -> None:
    """A worker that died while its parent was busy waiting on another worker is a zombie: its
    trials must be reaped, or the workers waiting on its twin trial wait forever."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        proc = psutil.Process(child.pid)
        assert owner_alive(_running_trial_of(proc), time.time())
        child.kill()
        deadline = time.time() + 10
        while proc.status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
            time.sleep(0.05)
        assert proc.status() == psutil.STATUS_ZOMBIE  # exited, not yet waited for
        assert not owner_alive(_running_trial_of(proc), time.time())
    finally:
        child.kill()
        child.wait()


def _no_secret(tmp_path: Path) -> None:
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PG_PASSWORD not in path.read_text(errors="ignore"), path


@pytest.mark.postgres
def test_four_workers_share_one_postgres_study(pg_server, tmp_path: Path) -> None:
    """Two invocations, as two machines of a team would start them, each with the workers
    option (workers=2: two worker processes): four workers on one study, none measuring a
    configuration twice, each invocation exporting, the password never written."""
    url = pg_server("four")
    # Four workers on 2 cores read every window beside the others: each is taken once, its
    # load named (the subject is the shared storage, not the figures).
    args = ["workload=mlp", "device=cpu", "workers=2", "study.name=shared", "study.n_trials=4",
            "study.agent=false", "study.remeasure_contended=0", f"study.storage={url}",
            *BARE_ARGS]
    for i in range(2):
        (tmp_path / f"host{i}").mkdir()
    procs = [_spawn(args, tmp_path / f"host{i}", tmp_path / f"host{i}.log") for i in range(2)]
    codes = [p.wait(timeout=600) for p in procs]
    logs = "".join((tmp_path / f"host{i}.log").read_text() for i in range(2))
    assert all(ran_to_the_end(c, logs) for c in codes), (codes, logs[-3000:])
    trials = _check_study(url, "shared", 8)  # 2 a worker: four interleave
    assert len({t.user_attrs["owner_pid"] for t in trials}) == 4
    assert all((tmp_path / f"host{i}" / "studies" / "shared" / "best.yaml").exists()
               for i in range(2))
    assert "***" in logs and PG_PASSWORD not in logs
    _no_secret(tmp_path)
    assert not [p for i in range(2) for p in (tmp_path / f"host{i}" / "tmp").glob("autotune-*")]


@pytest.mark.postgres
def test_a_killed_worker_does_not_stall_the_others(pg_server, tmp_path: Path) -> None:
    url = pg_server("killone")
    args = ["workload._target_=tests.workloads_faulty.SlowStep", "+workload.sleep_ms=150",
            "device=cpu", "study.name=k", "study.n_trials=4", "study.agent=false",
            f"study.storage={url}", *BARE_ARGS]
    victim = _spawn(args, tmp_path, tmp_path / "victim.log")
    deadline = time.time() + 180
    running = None
    while running is None and time.time() < deadline:
        time.sleep(0.5)
        try:
            trials = optuna.load_study(study_name="k", storage=url).get_trials()
        except Exception:  # noqa: BLE001 - study not created yet
            continue
        running = next((t for t in trials if t.state == TrialState.RUNNING
                        and t.user_attrs.get("owner_pid") == victim.pid), None)
    assert running is not None
    window = psutil.Process(victim.pid).children(recursive=True)
    others = [_spawn(args, tmp_path, tmp_path / f"w{i}.log") for i in range(2)]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    codes = [p.wait(timeout=600) for p in others]
    logs = "".join((tmp_path / f"w{i}.log").read_text() for i in range(2))
    assert all(ran_to_the_end(c, logs) for c in codes), (codes, logs[-3000:])
    trials = optuna.load_study(study_name="k", storage=url).get_trials()
    lost = trials[running.number]
    assert lost.state == TrialState.FAIL and lost.user_attrs["outcome"] == "driver_lost"
    assert any(t.user_attrs.get("requeue_of") == running.number and t.state.is_finished()
               for t in trials)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert sum(1 for t in trials if t.user_attrs.get("owner_pid") in [p.pid for p in others]) == 8
    from tests.test_cli import _all_gone

    assert _all_gone([p.pid for p in window], within_s=10)


def test_journal_storage_takes_several_workers(tmp_path: Path) -> None:
    url = f"journal:{tmp_path}/journal.log"
    (tmp_path / "tmp").mkdir()
    proc = run_cli(["workload=mlp", "device=cpu", "workers=2", "study.name=j", "study.n_trials=3",
                    f"study.storage={url}", *BARE_ARGS], tmp_path, timeout=600,
                   env={"TMPDIR": str(tmp_path / "tmp")})
    assert not list((tmp_path / "tmp").glob("autotune-*"))  # nothing of the study's left there
    assert ran_to_the_end(proc.returncode, proc.stdout + proc.stderr), \
        proc.stdout[-2000:] + proc.stderr[-2000:]
    from autotune.results.storage import open_storage

    _check_study(open_storage(url), "j", 3)
    # Two workers on one node: each one's trials ran on its own cores, disjoint from the
    # other's, so they did not measure each other. Each worker stamps its cores on every trial
    # it runs (a pruned one too); a window that measured records the cores it was allowed,
    # and they are its worker's. The same-training trial runs after the workers, on them all.
    study = optuna.load_study(study_name="j", storage=open_storage(url))
    sets: dict[int, set[tuple[int, ...]]] = {}
    for t in study.get_trials():
        a = t.user_attrs
        if a.get("source") == "same_training" or a.get("duplicate_of") is not None:
            continue
        sets.setdefault(a["owner_pid"], set()).add(tuple(a.get("owner_cpus") or ()))
        measured = (a.get("contention") or {}).get("cpu_set")
        if measured:
            assert measured == a["owner_cpus"], (t.number, measured, a["owner_cpus"])
    assert all(len(s) == 1 for s in sets.values()), sets
    cores = [set(next(iter(s))) for s in sets.values()]
    if len(os.sched_getaffinity(0)) >= 2:
        # Exactly the two workers' sets, disjoint: a study whose trials recorded none (or one
        # worker's only) must not pass.
        assert len(cores) == 2 and all(cores) and not cores[0] & cores[1], sets
