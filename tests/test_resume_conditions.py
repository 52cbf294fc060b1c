"""A study resumed under other measurement conditions is refused before it writes anything
(autotune/search/loop/conditions.py): a 2-rank study resumed as one process pruned its first trial
against the ranks' summed rate (2026-11-27)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.cli.app import build_setup
from autotune.cli.config import Config, LaunchConfig, StudyConfig, WindowConfig
from autotune.search.loop.conditions import ChangedConditions, check_resumable, record_conditions
from autotune.search.setup import StudySetup
from tests.conftest import BARE_ARGS, TINY_WINDOW, run_cli

MLP = "autotune.workloads.mlp.MLPWorkload"


def _setup(tmp_path: Path, workload: dict | None = None, nproc: int = 1,
           keep_global_batch: bool = False) -> StudySetup:
    cfg = Config(workload={"_target_": MLP, **(workload or {})}, device="cpu",
                 study=StudyConfig(name="s", out_dir=str(tmp_path / "studies"),
                                   keep_global_batch=keep_global_batch),
                 window=WindowConfig(**TINY_WINDOW), launch=LaunchConfig(nproc_per_node=nproc))
    overrides = [f"workload.{k}={v}" for k, v in (workload or {}).items()]
    return build_setup(cfg, ["workload._target_=" + MLP, *overrides])[0]


def _study_with_a_trial(setup: StudySetup, url: str, state: str = "COMPLETE") -> optuna.Study:
    study = optuna.create_study(storage=url, study_name=setup.name, direction="maximize")
    record_conditions(study, setup)
    if state == "COMPLETE":
        study.add_trial(optuna.trial.create_trial(value=100.0, params={}, distributions={}))
    else:
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                                  params={}, distributions={}))
    return study


def test_a_changed_condition_is_named_with_the_setting_that_restores_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    first = _setup(tmp_path)
    study = _study_with_a_trial(first, url)
    storage = study._storage
    check_resumable(storage, _setup(tmp_path), "the db")  # the same conditions resume

    with pytest.raises(ChangedConditions) as ranks:
        check_resumable(storage, _setup(tmp_path, nproc=2), "the db")
    said = str(ranks.value)
    assert "study 's' in the db holds 1 trial(s)" in said
    assert "ranks each trial runs as: 1 there, 2 in this run" in said
    assert "launch.nproc_per_node=1 launch.nnodes=1 (one process)" in said
    assert "study.name=NEW_NAME" in said and "Nothing was written" in said

    with pytest.raises(ChangedConditions) as sizes:
        check_resumable(storage, _setup(tmp_path, {"hidden": 64}), "the db")
    assert ("workload arguments: workload.hidden unset there, workload.hidden=64 in this run"
            in str(sizes.value))
    with pytest.raises(ChangedConditions, match="study.keep_global_batch=false"):
        check_resumable(storage, _setup(tmp_path, keep_global_batch=True), "the db")
    assert len(study.trials) == 1  # nothing written by a refusal


def test_a_study_without_measured_trials_or_a_recorded_context_resumes(tmp_path: Path) -> None:
    """Nothing to rank against: a study whose trials all failed, or one made before its
    context was recorded, takes the new conditions."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    failed = _study_with_a_trial(_setup(tmp_path), url, state="FAIL")
    check_resumable(failed._storage, _setup(tmp_path, nproc=2), "the db")
    old = optuna.create_study(storage=url, study_name="s2", direction="maximize")
    old.add_trial(optuna.trial.create_trial(value=1.0, params={}, distributions={}))
    setup = _setup(tmp_path, nproc=2)
    setup.name = "s2"
    check_resumable(old._storage, setup, "the db")


def test_a_study_stored_before_the_workloads_accumulation_was_read_is_refused(
        tmp_path: Path) -> None:
    """A study made before autotune read the workload's own accumulation recorded no global
    batch: its trials ran unaccumulated (each trial's batch_size its own global batch), so an
    accumulating run's figures are not ranked against them. The run is refused, naming both
    and why the study has none, before it writes anything; the conditions it was recorded
    under still resume it. A study.keep_global_batch study recorded then (its global batch,
    no keep_global_batch key) resumes under study.keep_global_batch=true as before."""
    import dataclasses

    from autotune.results.record import set_study_attrs

    url = f"sqlite:///{tmp_path / 'study.db'}"
    now = _setup(tmp_path, {"grad_accum": 4})
    assert now.global_batch == 128  # the MLP's batch 32 x 4
    before = dataclasses.replace(now, global_batch=None)  # what the older autotune recorded
    study = _study_with_a_trial(before, url)
    assert "global_batch" not in study.user_attrs
    with pytest.raises(ChangedConditions) as refused:
        check_resumable(study._storage, now, "the db")
    said = str(refused.value)
    assert "global batch per rank: none there, 128 in this run" in said
    assert "a study made before autotune read them ran every trial unaccumulated" in said
    assert "study.name=NEW_NAME" in said
    assert len(study.trials) == 1
    check_resumable(study._storage, before, "the db")  # its own conditions resume it

    kept = _setup(tmp_path, keep_global_batch=True)
    older = optuna.create_study(storage=url, study_name="kept", direction="maximize")
    record_conditions(older, dataclasses.replace(kept, global_batch=None))
    set_study_attrs(older, {"global_batch": 32})  # the older record: no keep_global_batch key
    older.add_trial(optuna.trial.create_trial(value=1.0, params={}, distributions={}))
    kept.name = "kept"
    check_resumable(older._storage, kept, "the db")
    plain = _setup(tmp_path)
    plain.name = "kept"
    with pytest.raises(ChangedConditions, match="study.keep_global_batch=true"):
        check_resumable(older._storage, plain, "the db")


def test_a_ranks_study_resumed_as_one_process_is_refused_and_keeps_its_trials(
        tmp_path: Path) -> None:
    """As a user met it: a study run as 2 ranks, then the same study.name as one process:
    exit 2, one paragraph naming both conditions, the study untouched; the default name of a
    run as ranks is a study of its own."""
    ranks = run_cli(["workload=mlp", "device=cpu", "study.name=mine", "study.n_trials=1",
                     "launch.nproc_per_node=2", *BARE_ARGS], tmp_path)
    assert ranks.returncode == 0, ranks.stdout[-2000:] + ranks.stderr[-2000:]
    db = tmp_path / "studies" / "mine" / "study.db"
    before = db.read_bytes()
    one = run_cli(["workload=mlp", "device=cpu", "study.name=mine", "study.n_trials=1",
                   *BARE_ARGS], tmp_path)
    assert one.returncode == 2, one.stdout[-2000:] + one.stderr[-2000:]
    assert "ranks each trial runs as: 2 there, 1 in this run" in one.stderr
    assert "launch.nproc_per_node=2 launch.nnodes=1" in one.stderr
    assert len(one.stderr.strip().splitlines()) == 1
    assert db.read_bytes() == before
    loaded = optuna.load_study(study_name="mine", storage=f"sqlite:///{db}")
    assert len(loaded.trials) == 1 and loaded.user_attrs["device"]["ranks"] == 2
    default = run_cli(["workload=mlp", "device=cpu", "study.n_trials=1",
                       "launch.nproc_per_node=2", *BARE_ARGS], tmp_path)
    assert default.returncode == 0, default.stdout[-2000:] + default.stderr[-2000:]
    assert "study 'mlp-cpu-2ranks'" in default.stdout
