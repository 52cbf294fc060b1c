"""The study's record has one declaration (autotune/results/record.py): no module writes a
user attribute by its string alone, and a real study stores only declared keys."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import optuna

from autotune.results.record import (
    StudyAttrs,
    TrialAttrs,
    declared,
    set_study_attrs,
    set_trial_attrs,
    study_attrs,
    trial_attrs,
)

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"
RAW_WRITES = {"set_user_attr", "set_trial_user_attr", "set_study_user_attr"}
# The ceiling cache's keys are made per configuration (pruning.ceiling_key), and record.py's
# own setters are where the typed records meet Optuna.
ALLOWED = {"record.py", "pruning.py"}


def _offenders(found: Callable[[ast.AST], bool]) -> list[str]:
    """file:line of every node of the package (but ALLOWED) that ``found`` picks."""
    out = []
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ALLOWED:
            out += [f"{path.relative_to(PACKAGE)}:{node.lineno}"  # type: ignore[attr-defined]
                    for node in ast.walk(ast.parse(path.read_text())) if found(node)]
    return out


def test_no_module_writes_an_attribute_by_its_string_alone() -> None:
    offenders = _offenders(lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                           and n.func.attr in RAW_WRITES)
    assert offenders == [], f"write through autotune.results.record instead: {offenders}"


def test_no_module_reads_user_attrs_directly() -> None:
    offenders = _offenders(lambda n: isinstance(n, ast.Attribute) and n.attr == "user_attrs"
                           and isinstance(n.ctx, ast.Load))
    assert offenders == [], f"read through trial_attrs/study_attrs instead: {offenders}"


def test_typed_records_round_trip_through_a_real_storage(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    trial = study.ask()
    set_trial_attrs(trial, {"knobs": {"batch_size": 32}, "source": "baseline", "outcome": "ok",
                            "samples_per_sec": 12.5, "timers": {"data_wait": None}})
    study.tell(trial, 12.5)
    set_study_attrs(study, {"memory_limit_gb": 4.0, "confirmation": {"finalists": [0]}})
    stored = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    t = stored.trials[0]
    assert trial_attrs(t)["knobs"] == {"batch_size": 32}
    assert trial_attrs(t)["timers"] == {"data_wait": None}
    assert study_attrs(stored)["confirmation"] == {"finalists": [0]}
    assert declared(t.user_attrs) == []
    assert declared({"knobs": 1, "typo_key": 2}) == ["typo_key"]
    assert declared(stored.user_attrs, StudyAttrs) == []
    assert "outcome" in TrialAttrs.__annotations__


def test_a_window_result_is_stored_under_the_declared_keys() -> None:
    """The window's result, the trial's stored record and what a twin copies are one
    declaration: every WindowResult field is a WindowAttrs key or said not stored (and why),
    and window_attrs writes nothing undeclared."""
    import dataclasses

    from autotune.measure.protocol import WindowResult
    from autotune.results.record import MEASURED_KEYS, ReadingAttrs, WindowAttrs
    from autotune.search.loop.window_record import NOT_STORED, window_attrs

    names = {f.name for f in dataclasses.fields(WindowResult)}
    window = set(WindowAttrs.__annotations__)
    assert names - set(NOT_STORED) <= window, sorted(names - set(NOT_STORED) - window)
    assert set(NOT_STORED) <= names, sorted(set(NOT_STORED) - names)  # no stale excuse
    full = WindowResult(outcome="crash", error="boom", tokens_computed=10, tokens=8,
                        loader_profile={"stages": []}, signal="SIGKILL", exit_code=-9,
                        length_groups={"group_steps": 2, "groups": 3})
    stored = set(window_attrs(full, "samples/s"))
    assert stored <= window, sorted(stored - window)
    # Every field stored is written (only the driver's verdict keys come later).
    assert names - set(NOT_STORED) <= stored, sorted(names - set(NOT_STORED) - stored)
    assert MEASURED_KEYS == window | set(ReadingAttrs.__annotations__)


def test_a_twin_records_every_field_its_measured_trial_has(tmp_path: Path) -> None:
    """One free knob of two values, four trials: configurations repeat, and each repeat is
    told its twin's outcome rather than measured again. The twin's record reads as the
    measured trial's to the confirmation, the estimate and the export: every measured field
    is there, with the same values (extras_s, warmup_s and top_kernels were once left out).
    And everything the real study wrote, its trials' records and its own (the confirmation's
    round, the numerics check, the exports' records), is declared in results/record.py."""
    from autotune.results.record import MEASURED_KEYS
    from tests.conftest import TINY_ARGS, ran_to_the_end, run_cli

    pinned = ["knobs.num_workers=0", "knobs.batch_size=32", "knobs.amp=off",
              "knobs.optimizer_impl=default", "knobs.host_allocator=default",
              "knobs.cpu_threads=2"]
    proc = run_cli(["workload=mlp", "device=cpu", "study.name=t", "study.n_trials=4",
                    "study.agent=false", "study.prune=false", *pinned, *TINY_ARGS,
                    "study.confirm_runs=1", "study.numerics_steps=2"], tmp_path)
    assert ran_to_the_end(proc.returncode, proc.stdout + proc.stderr), proc.stderr[-3000:]
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{tmp_path}/studies/t/study.db")
    trials = {t.number: t for t in study.get_trials()}
    undeclared = {n: declared(t.user_attrs) for n, t in trials.items() if declared(t.user_attrs)}
    assert undeclared == {}, undeclared
    assert declared(study.user_attrs, StudyAttrs) == [], study.user_attrs.keys()
    assert {"confirmation", "numerics"} <= set(study.user_attrs), sorted(study.user_attrs)
    twins = [t for t in trials.values() if "duplicate_of" in t.user_attrs]
    assert twins, [t.user_attrs.get("knobs") for t in trials.values()]
    for twin in twins:
        measured = trials[twin.user_attrs["duplicate_of"]]
        fresh = {k: v for k, v in measured.user_attrs.items() if k in MEASURED_KEYS}
        assert {"extras_s", "warmup_s", "wall_s", "timers", "outcome"} <= set(fresh)
        copied = {k: v for k, v in twin.user_attrs.items() if k in MEASURED_KEYS}
        assert copied == fresh, sorted(set(fresh) ^ set(copied))
        assert twin.value == measured.value


def test_the_ceiling_cache_is_declared_as_its_family_of_keys() -> None:
    """A real study caches ceilings under one key per configuration (search/pruning.py); the
    record declares them as a family, and a key outside it is still named."""
    from autotune.search.pruning import _noise_key, ceiling_key

    knobs = {"batch_size": 32, "num_workers": 1}
    attrs = {ceiling_key("loader", knobs): 100.0, ceiling_key("compute", knobs): 90.0,
             _noise_key("compute", knobs): 0.02, "confirmation": {}, "ceiling_x": 1}
    assert declared(attrs, StudyAttrs) == ["ceiling_x"]
    assert declared({ceiling_key("loader", knobs): 1.0}) != []  # a trial's record has no cache
