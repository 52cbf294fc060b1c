"""A user workload that cannot run fails fast: the study stops after the crashed baseline with
one paragraph naming the error and the user's line, exits non-zero, and retries the baseline
once fixed. ``+workload.<arg>=`` reaches a user factory whatever the argument's name."""

from __future__ import annotations

import traceback
from pathlib import Path

import optuna
import yaml

from autotune.cli.main import force_workload_args
from autotune.search.loop.failfast import NOTHING_EXPORTED, user_frame
from tests.conftest import TINY_ARGS, run_cli

CRASH = "workload._target_=tests.workloads_user.CrashesEveryStep"


def test_crashing_baseline_stops_the_study_with_one_paragraph(tmp_path: Path) -> None:
    args = [CRASH, "device=cpu", "study.name=crash", *TINY_ARGS]
    proc = run_cli([*args, "study.n_trials=4"], tmp_path)
    assert proc.returncode == NOTHING_EXPORTED, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("autotune: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    line = errors[0]
    assert "baseline" in line and "AttributeError" in line and "'dict' object has no attribute 'to'" in line
    assert "workloads_user.py:" in line and "in loss" in line, line
    storage = f"sqlite:///{tmp_path}/studies/crash/study.db"
    assert len(optuna.load_study(study_name="crash", storage=storage).get_trials()) == 1
    assert not (tmp_path / "studies" / "crash" / "best.yaml").exists()

    # Fixed, the same command resumes and measures the baseline again (no copied crash).
    fixed = run_cli([*args, "study.n_trials=1", "+workload.broken=false"], tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    trials = optuna.load_study(study_name="crash", storage=storage).get_trials()
    assert [t.user_attrs["source"] for t in trials] == ["baseline", "baseline"]
    assert trials[1].user_attrs["outcome"] == "ok" and "duplicate_of" not in trials[1].user_attrs
    assert (tmp_path / "studies" / "crash" / "best.yaml").exists()


def test_user_frame_is_the_last_frame_outside_libraries() -> None:
    def users_loss() -> None:
        import torch

        torch.ones(2).view(3)  # raises inside torch

    try:
        users_loss()
    except RuntimeError:
        tail = traceback.format_exc()
    where = user_frame(tail)
    assert where is not None and where.startswith(__file__) and where.endswith("in users_loss")
    assert user_frame("no traceback here") is None


def test_plus_workload_arg_is_forced() -> None:
    assert force_workload_args(["+workload.image_size=224", "++workload.x=1", "+knobs.y=2",
                                "workload._target_=a.B"]) == [
        "++workload.image_size=224", "++workload.x=1", "+knobs.y=2", "workload._target_=a.B"]


def test_user_factory_gets_an_argument_the_default_workload_has(tmp_path: Path) -> None:
    proc = run_cli(["workload._target_=tests.workloads_user.SizedMLP", "+workload.image_size=12",
                    "device=cpu", "study.n_trials=1", "study.name=sized", *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sized-mlp image_size=12" in proc.stdout
    best = yaml.safe_load((tmp_path / "studies" / "sized" / "best.yaml").read_text())
    assert best["workload"] == "sized-mlp image_size=12"
