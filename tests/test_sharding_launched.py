"""Sharded trials launched as the production run is: 2 gloo ranks under PyTorch's elastic
launcher, FSDP2 over a CPU device mesh, real process groups (nothing mocked)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from tests.conftest import ROOT, TINY_ARGS, child_env, leftover_trials, run_cli
from tests.test_ddp import names_the_failed_rank

LAUNCH = ["device=cpu", "launch.nproc_per_node=2", "study.numerics_steps=0"]
#: A Llama of examples/fsdp_train.py small enough for a test (2 decoder layers of 64).
SIZES = {"vocab": 256, "hidden": 64, "layers": 2, "intermediate": 128, "heads": 2,
         "seq_len": 32, "n_sequences": 256}
LLAMA = ["workload._target_=examples.fsdp_train.LlamaWorkload",
         *(f"+workload.{k}={v}" for k, v in SIZES.items())]


def _rows(tmp_path: Path, name: str) -> list[dict[str, str]]:
    with open(tmp_path / "studies" / name / "trials.csv") as f:
        return list(csv.DictReader(f))


def test_a_sharded_study_exports_fsdp_arguments_and_its_torchrun_line_trains_the_example(
        tmp_path: Path) -> None:
    """Every trial ran sharded as 2 ranks: trials.csv has each rank's peak and the
    all-gathers and reduce-scatters; best.yaml has fully_shard's arguments with the blocks the
    ranks found (the Llama's decoder layers, by their own name); its torchrun line trains
    examples/fsdp_train.py sharded as measured; autotune verify runs the script as 2 ranks."""
    env = child_env()
    proc = run_cli([*LLAMA, "knobs.sharding=full_shard", "study.name=s", "study.n_trials=2",
                    "study.confirm_runs=0", "study.remeasure_contended=0", *LAUNCH, *TINY_ARGS],
                   tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [r for r in _rows(tmp_path, "s") if r["state"] == "COMPLETE"]
    assert rows and all(r["knob.sharding"] == "full_shard" for r in rows)
    for r in rows:
        assert float(r["peak_memory_gb.rank0"]) > 0 and float(r["peak_memory_gb.rank1"]) > 0
        assert float(r["peak_memory_gb"]) == max(float(r["peak_memory_gb.rank0"]),
                                                 float(r["peak_memory_gb.rank1"]))
        # 2 decoder layers and the root: 3 groups gathered for forward, 2 again for backward.
        assert float(r["comm.all_gathers"]) == 5 and float(r["comm.reduce_scatters"]) == 3
        assert float(r["comm.all_gather_ms"]) > 0 and float(r["comm.reduce_scatter_ms"]) > 0
        assert r["comm.collectives_source"] == "gloo"
    best = yaml.safe_load((tmp_path / "studies" / "s" / "best.yaml").read_text())
    fsdp = best["fsdp_kwargs"]
    assert "ddp_kwargs" not in best and "ddp_step" not in best  # the wrapper it applies only
    assert fsdp["reshard_after_forward"] is True and fsdp["mesh_shape"] == [2]
    assert fsdp["block_types"] == ["LlamaDecoderLayer"] and fsdp["blocks_per_group"] == 1
    report = (tmp_path / "studies" / "s" / "report.md").read_text()
    assert "Sharding per trial" in report and "FSDP2 arguments" in report

    size = ",".join(f"{k}={v}" for k, v in SIZES.items())
    command = best["launch"]["torchrun"].replace(
        "your_train.py", f"{ROOT}/examples/fsdp_train.py studies/s/best.yaml --steps 8 "
        f"--size {size}")
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                         timeout=180, env={**env, "PATH": f"{Path(sys.executable).parent}"
                                           f"{os.pathsep}{os.environ['PATH']}"})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "rank 0 of 2: full_shard (FSDP2)" in run.stdout  # the model is FSDP2's, not DDP

    check = run_cli(["verify", "studies/s", "--rounds", "1", "--nproc-per-node", "2",
                     "--script", f"{ROOT}/examples/fsdp_train.py", "studies/s/best.yaml",
                     "--steps", "72", "--size", size], tmp_path, timeout=400)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "as 2 ranks under torchrun" in check.stdout


#: What each fault's trial records: its outcomes, and a pattern its reason matches.
FAULTS = {
    "raise": ({"crash"}, r"^crash: rank 1: ValueError: rank 1's injected fault \(exited with "
                         r"code 1\); rank 0 (was stopped by the launcher|failed in a collective)"),
    # rank 1 waits in an all-gather rank 0 never joins: both stuck in torch; the stacks say so
    "gather": ({"stalled"}, r"rank 1 in .*all_gather.*; rank 0 in |rank 0 in .*; rank 1 in "
                            r".*all_gather"),
    "kill": ({"crash", "stalled"},
             r"^crash: rank 1 (died from SIGKILL|ended without)|rank 1 had ended"),
}


def test_sharded_ranks_that_raise_die_or_hang_in_an_all_gather_fail_their_trials_by_name(
        tmp_path: Path) -> None:
    """One sharded study (full_shard), a healthy baseline, then a trial per fault of rank 1:
    it raises, it waits in an all-gather its peer never joins, it is killed with SIGKILL.
    Each fails its trial naming rank 1, the study goes on and exports, and no rank, launcher
    or loader process is left."""
    since = time.time() - 1
    count = tmp_path / "windows"
    count.mkdir()
    proc = run_cli(["workload._target_=tests.workloads_faulty.RankFault",
                    f"+workload.faults=[none,{','.join(FAULTS)}]", f"+workload.count_dir={count}",
                    "knobs.sharding=full_shard", "knobs.optimizer_impl=default",
                    "study.name=f", "study.n_trials=4",
                    "study.confirm_runs=0", "study.remeasure_contended=0", "study.prune=false",
                    "window.stall_s=5", *LAUNCH, *TINY_ARGS], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "studies" / "f" / "best.yaml").exists()
    study = optuna.load_study(study_name="f", storage=f"sqlite:///{tmp_path}/studies/f/study.db")
    trials = study.get_trials()
    assert trials[0].state == TrialState.COMPLETE  # the baseline: fault "none"
    assert trials[0].user_attrs["knobs"]["sharding"] == "full_shard"
    failed = [(t.user_attrs.get("outcome"), t.user_attrs.get("reason", "")) for t in trials[1:]
              if t.user_attrs.get("outcome") != "ok"]
    for fault, (outcomes, pattern) in FAULTS.items():
        hits = [(o, r) for o, r in failed if re.search(pattern, r)]
        assert len(hits) == 1, f"{fault}: {hits or failed}"
        assert hits[0][0] in outcomes, (fault, hits)
        if fault != "gather":  # both ranks wait in torch: their stacks rank neither first
            names_the_failed_rank(hits[0][1])
    time.sleep(0.5)
    assert leftover_trials(since, tmp_path) == []


def test_a_sharded_finalist_trains_like_its_unsharded_reference(tmp_path: Path) -> None:
    """The numerics check of a sharded trial: its first optimizer steps as 2 sharded ranks
    against the reference's as 2 replicated (DDP) ranks, same seed, data and batch: the
    sharding family, fp32, a deviation far inside its tolerance. The study checks only the
    trial it exports (on gloo DDP usually wins), so the sharded trial is checked here by the
    study's own check, on the study's setup."""
    from autotune.cli.app import build_setup
    from autotune.cli.compose import compose_config
    from autotune.search.checks.numerics import _check_one, check_tolerance

    pinned = ["knobs.fsdp_wrap_blocks=1", "knobs.fsdp_prefetch=0", "knobs.fsdp_param_dtype=fp32",
              "knobs.bucket_cap_mb=25", "knobs.gradient_as_bucket_view=false",
              "knobs.static_graph=false", "knobs.batched_grad_copy=false",
              "knobs.optimizer_impl=default", "knobs.host_allocator=default",
              "knobs.activation_checkpointing=false", "knobs.batch_size=4", "knobs.amp=off",
              "knobs.num_workers=0", "knobs.set_to_none=true", "knobs.broadcast_buffers=true"]
    overrides = [*LLAMA, "knobs.sharding=[no_shard,full_shard]", *pinned, "study.name=n",
                 "study.n_trials=2", "study.confirm_runs=0", "study.remeasure_contended=0",
                 "study.prune=false", "device=cpu", "launch.nproc_per_node=2",
                 "study.numerics_steps=4", *TINY_ARGS, f"study.out_dir={tmp_path}/studies"]
    proc = run_cli(overrides, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    study = optuna.load_study(study_name="n", storage=f"sqlite:///{tmp_path}/studies/n/study.db")
    sharded = [t for t in study.get_trials() if t.user_attrs["knobs"]["sharding"] == "full_shard"]
    assert sharded, [t.user_attrs["knobs"]["sharding"] for t in study.get_trials()]
    checked = (study.user_attrs.get("numerics") or {}).get("trials") or {}
    entry = checked.get(str(sharded[0].number))
    if entry is None:  # not the exported trial: run the study's check on it
        setup = build_setup(compose_config(overrides), overrides)[0]
        tolerance = check_tolerance(setup.study.numerics_tolerance)
        entry = _check_one(setup, sharded[0], tolerance, {}, None)
    assert entry["families"] == ["sharding"] and entry["passed"] is True, entry
    assert len(entry["losses"]) == 4 and entry["max_rel_dev"] < 1e-3, entry
