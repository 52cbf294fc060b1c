"""Harness figures for docs/benchmarks.md: watchdog overshoot, time to reap a dead driver's
trials, and trials/minute with 1, 2 and 4 workers on one PostgreSQL study (mlp workload).

    python benchmarks/harness.py [--record]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.core.env import probe  # noqa: E402
from autotune.core.knobs import build_space  # noqa: E402
from autotune.measure.protocol import TrialRequest  # noqa: E402
from autotune.measure.runner import run_window  # noqa: E402
from autotune.results.storage import open_storage  # noqa: E402
from autotune.search.ownership import reap_lost_trials  # noqa: E402
from autotune.workloads.mlp import MLPWorkload  # noqa: E402
from benchmarks.child_env import child_env  # noqa: E402
from tests.pgserver import PgServer  # noqa: E402

TINY = ["window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=3",
        "window.min_measure_steps=2", "window.profile=false"]
CLI = [sys.executable, "-c", "from autotune.cli.main import main; main()"]
ENV = child_env()


def overshoot(runs: int, tmp: Path) -> tuple[list[float], list[float]]:
    """Seconds past the limit until the hung trial's process group is dead: timeout, stall."""
    env = probe("cpu")
    base = build_space(env, MLPWorkload(), {}).baseline
    window = {"warmup_steps": 2, "measure_steps": 6, "measure_seconds": 3, "min_measure_steps": 2,
              "profile": False, "profile_steps": 2}
    timeouts, stalls = [], []
    for i in range(runs):
        req = TrialRequest({"_target_": "tests.workloads_faulty.HangingStep"}, base, "cpu",
                           {**window, "timeout_s": 8.0, "stall_s": 600.0})
        res = run_window(req, tmp / f"t{i}")
        assert res.outcome == "timeout", res.error
        timeouts.append(res.wall_s - 8.0)
        req = TrialRequest({"_target_": "tests.workloads_faulty.HangingStep"}, base, "cpu",
                           {**window, "timeout_s": 600.0, "stall_s": 3.0})
        res = run_window(req, tmp / f"s{i}")
        assert res.outcome == "stalled", res.error
        # A stall counts from the last heartbeat, not from the start: report the whole trial's
        # wall time (start-up + 3 warm steps + stall_s + kill).
        stalls.append(res.wall_s)
    return timeouts, stalls


def reap_time(url: str, tmp: Path) -> float:
    """Kill a driver mid-trial; time the next worker's reap of its RUNNING trial."""
    args = ["workload._target_=tests.workloads_faulty.SlowStep", "+workload.sleep_ms=300",
            "device=cpu", "study.name=reap", f"study.storage={url}", "study.n_trials=2", *TINY]
    driver = subprocess.Popen([*CLI, *args], cwd=tmp, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    storage = open_storage(url)
    while True:
        time.sleep(0.3)
        try:
            study = optuna.load_study(study_name="reap", storage=storage)
        except KeyError:
            continue
        if any(t.state == TrialState.RUNNING for t in study.get_trials()):
            break
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    t0 = time.perf_counter()
    reaped = reap_lost_trials(study)
    call = time.perf_counter() - t0
    assert reaped, "nothing to reap"
    return call


def throughput(url_for, workers: int, n_trials: int, tmp: Path) -> float:
    url = url_for(f"tpm{workers}")
    args = ["workload=mlp", "device=cpu", f"study.name=tpm{workers}", f"study.storage={url}",
            f"study.n_trials={n_trials}", "study.agent=false", "study.confirm_runs=0", *TINY]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*CLI, *args], cwd=tmp, env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    assert all(p.wait() == 0 for p in procs)
    minutes = (time.perf_counter() - t0) / 60
    done = [t for t in optuna.load_study(study_name=f"tpm{workers}", storage=url).get_trials()
            if t.state.is_finished()]
    return len(done) / minutes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trials-per-worker", type=int, default=6)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        pg = PgServer("bench-pw")
        try:
            t_over, s_wall = overshoot(a.runs, tmp)
            print("timeout overshoot", t_over, "stall walls", s_wall, flush=True)
            reap_call = reap_time(pg.url_for("reap"), tmp)
            print("reap call", reap_call, flush=True)
            tpm = {w: throughput(pg.url_for, w, a.trials_per_worker, tmp) for w in (1, 2, 4)}
            print("trials/min", tpm, flush=True)
        finally:
            pg.stop()
    lines = [
        "",
        f"### Harness ({datetime.date.today()}, {platform.machine()} CPU, {os.cpu_count()} cores, "
        "no GPU; PostgreSQL 15 on loopback)",
        "",
        f"Command: `python benchmarks/harness.py --runs {a.runs} --trials-per-worker "
        f"{a.trials_per_worker} --record`",
        "",
        "| what | figure |",
        "|---|---|",
        f"| watchdog overshoot past `window.timeout_s` (hung step, {a.runs} runs) | median "
        f"{statistics.median(t_over):.2f} s, max {max(t_over):.2f} s |",
        f"| hung step with `window.stall_s=3`: whole trial wall time ({a.runs} runs) | median "
        f"{statistics.median(s_wall):.2f} s, max {max(s_wall):.2f} s |",
        f"| reaping a SIGKILLed driver's RUNNING trial (`reap_lost_trials`, PostgreSQL) | "
        f"{reap_call * 1e3:.0f} ms |",
        *[f"| trials/minute, mlp, tiny window, {w} worker(s) x {a.trials_per_worker} trials | "
          f"{v:.1f} |" for w, v in tpm.items()],
        "",
    ]
    print("\n".join(lines))
    if a.record:
        with open(ROOT / "docs" / "benchmarks.md", "a") as f:
            f.write("\n".join(lines))


if __name__ == "__main__":
    main()
