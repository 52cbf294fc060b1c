"""Trials launched as the production run is: 2 ranks under PyTorch's elastic launcher, gloo on
these CPUs, real process groups (nothing mocked). Issue 29."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from autotune.core.distributed import ddp_kwargs, rank_cores
from autotune.core.env import probe
from autotune.core.knobs import build_space
from autotune.diagnose.verdicts import diagnose
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, TINY_ARGS, leftover_trials, run_cli

LAUNCH = ["device=cpu", "launch.nproc_per_node=2", "study.numerics_steps=0"]


def _trials(tmp_path: Path, name: str) -> list[dict[str, str]]:
    with open(tmp_path / "studies" / name / "trials.csv") as f:
        return list(csv.DictReader(f))


def test_a_launched_study_runs_every_trial_as_ranks_and_its_torchrun_line_runs(
        tmp_path: Path) -> None:
    """Every trial ran 2 ranks; trials.csv has the all-reduce's share per trial; best.yaml has
    the launch section, DDP's arguments and a torchrun line, which runs as printed (the
    script's name put in) on examples/ddp_train.py with 2 ranks on their own cores."""
    proc = run_cli(["workload=mlp", "study.name=ddp", "study.n_trials=2", "study.confirm_runs=0",
                    "launch.scaling=true", *LAUNCH, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "every trial runs 2 ranks (gloo" in proc.stdout
    assert "a scaling measurement (3 rounds" in proc.stdout
    rows = _trials(tmp_path, "ddp")
    measured = [r for r in rows if r["state"] == "COMPLETE"]
    assert measured and all(r["ranks"] == "2" for r in measured)
    assert all(0.0 <= float(r["comm.exposed_share"]) <= 1.0 for r in measured)
    assert all(float(r["comm.unsynced_step_ms"]) > 0 for r in measured)
    best = yaml.safe_load((tmp_path / "studies" / "ddp" / "best.yaml").read_text())
    launch = best["launch"]
    assert launch["nproc_per_node"] == 2 and launch["backend"] == "gloo"
    assert launch["cores_per_rank"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert set(best["ddp_kwargs"]) >= {"bucket_cap_mb", "gradient_as_bucket_view", "static_graph"}
    report = (tmp_path / "studies" / "ddp" / "report.md").read_text()
    assert "Gradient all-reduce per trial" in report and "Every trial ran as 2 ranks" in report
    # launch.scaling: the exported configuration as 2 ranks and as one rank on rank 0's
    # cores, 3 interleaved rounds, the efficiency with its interval in best.yaml, the summary
    # and the report.
    scaling = best["scaling"]
    assert scaling["trial"] == best["best_trial"] and scaling["ranks"] == 2
    assert len(scaling["all_ranks"]) == len(scaling["one_rank"]) == 3, scaling
    assert all(v and v > 0 for v in scaling["all_ranks"] + scaling["one_rank"]), scaling
    assert scaling["one_rank_cores"] == ",".join(map(str, rank_cores(0, 2)))
    assert scaling["efficiency"]["rounds"] == 3 and scaling["efficiency"]["ci_low"] is not None
    assert "scaling efficiency" in proc.stdout and f"Scaling: {scaling['words']}" in report
    for knob in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "batched_grad_copy"):
        assert best["ddp_kwargs"][knob] == best["knobs"][knob]
    # No accumulation: the step knob is fixed with why; no hook unless listed.
    assert best["ddp_step"] == {"comm_hook": None, "register": None, "accumulation_no_sync": False}
    assert "keep_global_batch" in best["fixed_knobs"]["accumulation_no_sync"]["why"]

    command = launch["torchrun"].replace(
        "your_train.py", f"{ROOT}/examples/ddp_train.py studies/ddp/best.yaml --steps 12")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                         timeout=180, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "rank 0 of 2" in run.stdout and "samples/s (all ranks)" in run.stdout

    # autotune verify runs the same script as 2 ranks on both sides, interleaved.
    check = run_cli(["verify", "studies/ddp", "--rounds", "3", "--nproc-per-node", "2",
                     "--script", f"{ROOT}/examples/ddp_train.py", "studies/ddp/best.yaml",
                     "--steps", "75"], tmp_path, timeout=400)  # the Meter's 20 + 50 steps
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "as 2 ranks under torchrun" in check.stdout
    verified = json.loads((tmp_path / "studies" / "ddp" / "verify.json").read_text())
    assert all(len(verified["figures"][side]) == 3 for side in ("baseline", "exported"))


@pytest.mark.parametrize("fault,outcome,words", [
    ("raise", "crash", "rank 1: ValueError: rank 1's injected fault"),
    ("hang", "stalled", "rank 1 in"),
    ("kill", "crash", "rank 1 "),  # "died from SIGKILL", or "ended without writing its result"
])
def test_a_failing_rank_fails_its_trial_by_name_and_leaves_no_process(
        tmp_path: Path, fault: str, outcome: str, words: str) -> None:
    """Rank 1 raises, hangs in its loss, or is killed with SIGKILL after a few steps: the
    trial fails with a reason naming rank 1 (a hang within the few-second stall limit, with
    each rank's frame: rank 1 in the workload's loss, rank 0 waiting in backward), the study
    records it and ends, and no rank or loader process is left."""
    since = time.time() - 1
    proc = run_cli(["workload._target_=tests.workloads_faulty.RankFault",
                    f"+workload.fault={fault}", "study.name=f", "study.n_trials=1",
                    "window.stall_s=5", *LAUNCH, *TINY_ARGS], tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # nothing to export
    study = optuna.load_study(study_name="f", storage=f"sqlite:///{tmp_path}/studies/f/study.db")
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs["outcome"] == outcome
    assert words in trial.user_attrs["reason"], trial.user_attrs["reason"]
    if fault == "kill":  # named as the one that died, not as a peer that lost its connection
        assert trial.user_attrs["reason"].startswith(("crash: rank 1 died from SIGKILL",
                                                      "crash: rank 1 ended without")), \
            trial.user_attrs["reason"]
    if fault == "hang":
        reason = trial.user_attrs["reason"]
        assert reason.index("rank 1 in") < reason.index("rank 0 in")  # the stuck rank first
        assert "workloads_faulty.py" in reason
    time.sleep(0.5)
    assert leftover_trials(since, tmp_path) == []


def test_two_launched_studies_at_once_do_not_meet(tmp_path: Path) -> None:
    """Two studies, each trial 2 ranks with its own rendezvous (a free port, its own run id),
    started together in one directory tree: both complete, neither waits on the other."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-c", "from autotune.cli.main import main; main()", "workload=mlp",
             f"study.name={name}", "study.n_trials=1", "study.confirm_runs=0", *LAUNCH,
             *TINY_ARGS], cwd=tmp_path / name, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
        assert "1 trials (1 complete" in out


def test_ranks_split_the_cores_and_the_space_is_searched_per_rank() -> None:
    """Each local rank a disjoint, even share; the loader and thread knobs within a rank's
    share; the DDP knobs searched only with several ranks."""
    assert rank_cores(0, 2, [0, 1]) == [0] and rank_cores(1, 2, [0, 1]) == [1]
    assert rank_cores(0, 2, [0, 1, 2]) == [0, 1] and rank_cores(1, 2, [0, 1, 2]) == [2]
    assert rank_cores(3, 4, [0, 1]) == [1]  # fewer cores than ranks: shared, never none
    shares = [rank_cores(r, 8, list(range(16))) for r in range(8)]
    assert sorted(c for s in shares for c in s) == list(range(16))

    from autotune.cli.app import ranked
    from autotune.cli.config import LaunchConfig

    env = probe("cpu")
    one = build_space(env, MLPWorkload(), {})
    assert one.fixed["bucket_cap_mb"][0] == 25 and "one process" in one.fixed["bucket_cap_mb"][1]
    two_env = ranked(env, LaunchConfig(nproc_per_node=2))
    two = build_space(two_env, MLPWorkload(), {})
    share = max(1, env.cpu_count // 2)
    assert max(two.domains["num_workers"].values) == share
    assert max(two.domains["cpu_threads"].values) == share
    assert two.baseline["cpu_threads"] == 1  # torchrun's OMP_NUM_THREADS=1 per rank
    assert len(two.domains["bucket_cap_mb"].values) > 1
    assert len(two.domains["gradient_as_bucket_view"].values) == 2


def test_ddp_arguments_are_named_for_the_torch_that_runs_them() -> None:
    knobs = {"bucket_cap_mb": 5, "gradient_as_bucket_view": True, "static_graph": False,
             "broadcast_buffers": False}
    assert ddp_kwargs(knobs, "2.11.0+cu130")["broadcast_buffers"] is False
    new = ddp_kwargs(knobs, "2.14.1+cu130")
    assert new["forward_sync_buffers"] is False and "broadcast_buffers" not in new
    assert new["bucket_cap_mb"] == 5 and new["gradient_as_bucket_view"] is True


def test_the_communication_verdict_needs_the_measured_share() -> None:
    """Communication-bound only where the step without the all-reduce is measurably faster by
    COMM_EXPOSED_SHARE of the step; then the seeds' fixes are proposed."""
    knobs = {"batch_size": 32, "bucket_cap_mb": 25, "gradient_as_bucket_view": False,
             "static_graph": False, "num_workers": 0, "amp": "off"}
    base = {"samples_per_sec": 1000.0, "step_ms": {"median": 10.0}, "peak_memory_gb": 0.1,
            "timers": {"data_wait": 0.02, "compute": 0.9}}
    hidden = diagnose({**base, "comm": {"exposed_share": 0.05, "exposed_ms": 0.5}}, knobs, "cpu", 10)
    assert hidden["bottleneck"] != "communication"
    exposed = diagnose({**base, "comm": {"exposed_share": 0.41, "exposed_ms": 4.1}}, knobs, "cpu", 10)
    assert exposed["bottleneck"] == "communication"
    assert "41% of the step" in exposed["summary"]
    assert [f["knob"] for f in exposed["fixes"]][:3] == [
        "gradient_as_bucket_view", "bucket_cap_mb", "static_graph"]


def test_a_compute_heavy_model_with_few_parameters_is_not_communication_bound(
        tmp_path: Path) -> None:
    """Convolutions over large images with a few thousand parameters: the all-reduce is tiny
    beside the step, measured so, and the verdict is not communication."""
    proc = run_cli(["workload._target_=tests.workloads_user.ConvHeavy", "study.name=conv",
                    "study.n_trials=1", "study.confirm_runs=0", *LAUNCH, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = _trials(tmp_path, "conv")
    assert float(row["comm.exposed_share"]) < 0.25
    assert row["bottleneck"] != "communication"


def test_a_rendezvous_endpoint_already_taken_fails_fast_by_name(tmp_path: Path) -> None:
    """A port another process listens on: refused before any trial, naming it (torch's store
    would retry it until the stall limit), and the study folder is not created."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        proc = run_cli(["workload=mlp", f"launch.rdzv_endpoint=127.0.0.1:{port}", "study.name=r",
                        *LAUNCH, *TINY_ARGS], tmp_path, timeout=120)
    assert proc.returncode == 2  # a usage error, before any trial (not a stall at its limit)
    assert f"launch.rdzv_endpoint=127.0.0.1:{port}" in proc.stderr and "free port" in proc.stderr
    assert not (tmp_path / "studies" / "r" / "trials").exists()


def test_several_nodes_without_an_endpoint_are_refused_with_what_works(tmp_path: Path) -> None:
    proc = run_cli(["workload=mlp", "device=cpu", "launch.nnodes=2"], tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "launch.nnodes=2" in proc.stderr and "launch.rdzv_endpoint=" in proc.stderr
    assert "autotune follow" in proc.stderr
