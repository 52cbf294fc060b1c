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
