"""best.yaml's diagnoses say which of their fixes the study measured, and what each gave
(autotune/results/tried_fixes.py): an mlp study's best read "try num_workers=1" after the study
had run that and pruned it (2026-11-27). Real Optuna studies, trials stored as a study stores
them (no window runs here)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.results.export import best_document
from autotune.results.report_data import gather
from autotune.results.report_html import markdown
from autotune.workloads.mlp import MLPWorkload

WORKERS = {"knob": "num_workers", "value": 1, "why": "the step waits on the loader",
           "with": {"persistent_workers": True}}
BATCH = {"knob": "batch_size", "value": 64, "why": "bigger matrix products"}
AMP = {"knob": "amp", "value": "bf16", "why": "native bf16 units"}


@pytest.fixture
def space(cpu_env: Env) -> Any:
    return build_space(cpu_env, MLPWorkload(), {})


def _add(study: optuna.Study, space: Any, knobs: dict[str, Any], value: float | None,
         state: str = "COMPLETE", **attrs: Any) -> None:
    full = space.complete(space.searched({**space.baseline, **knobs}))
    study.add_trial(optuna.trial.create_trial(
        state=getattr(optuna.trial.TrialState, state), value=value,
        user_attrs={"knobs": full, "outcome": "ok", "samples_per_sec": value or 0.0,
                    "peak_memory_gb": 0.2, "step_ms": {"median": 1.0}, **attrs},
        system_attrs={"constraints": [-1.0]} if state == "COMPLETE" else {}))


def test_each_fix_says_what_the_study_measured_of_it(space: Any) -> None:
    study = optuna.create_study(direction="maximize")
    diagnosis = {"bottleneck": "input_pipeline", "summary": "Input-bound",
                 "fixes": [WORKERS, BATCH, AMP]}
    _add(study, space, {}, 63173.4, source="baseline", diagnosis=diagnosis)
    # The workers' fix, as the agent ran it (prefetch_factor 2 comes with the first workers):
    # pruned on its loader ceiling.
    _add(study, space, {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 2},
         None, state="PRUNED", outcome="pruned",
         reason="pruned: loader ceiling 35,433.4 samples/s is below the best trial's 63,173.4")
    _add(study, space, {"batch_size": 64}, 50000.0)  # measured slower
    doc = best_document(study, "")
    assert doc is not None and doc["best_trial"] == 0
    # Measured no faster: no longer advice, but what the study measured of it.
    tried = doc["diagnosis"]["tried"]
    assert tried[0] == ("num_workers=1 + persistent_workers=True (measured in trial 1: pruned: "
                        "loader ceiling 35,433.4 samples/s is below the best trial's 63,173.4)")
    assert tried[1] == "batch_size=64 (measured in trial 2: 0.79x this trial, search windows)"
    assert doc["diagnosis"]["fixes"] == ["amp=bf16"]  # not measured: advice still
    # A trial that changes the fix's knob and another is not the fix measured (num_workers: a
    # knob every CPU searches; amp is searched only where the CPU has native bf16).
    study2 = optuna.create_study(direction="maximize")
    _add(study2, space, {}, 100.0, source="baseline", diagnosis=diagnosis)
    _add(study2, space, {"batch_size": 64, "num_workers": 2}, 90.0)
    doc2 = best_document(study2, "")
    assert doc2 is not None and doc2["diagnosis"]["fixes"][1] == "batch_size=64"
    assert "tried" not in doc2["diagnosis"]
    # A fix measured faster than this trial stays advice, with its figure.
    study3 = optuna.create_study(direction="maximize")
    _add(study3, space, {}, 100.0, source="baseline", diagnosis=diagnosis)
    _add(study3, space, {"batch_size": 64}, 120.0)
    _add(study3, space, {"num_workers": 1, "persistent_workers": True, "prefetch_factor": 2},
         80.0)
    doc3 = best_document(study3, "")
    assert doc3 is not None and doc3["best_trial"] == 1
    yours = doc3["baseline_diagnosis"]
    assert yours["fixes"][0].startswith("batch_size=64 (measured in trial 1: 1.20x")
    assert [f.split(" (")[0] for f in yours["tried"]] == [
        "num_workers=1 + persistent_workers=True"]
    report = markdown(gather(study3, ""))  # the report's table: advice and tried apart
    assert "measured already, no faster" in report and "0.80x this trial" in report
    # The report's diagnosis table shows the same words.
    assert "measured in trial 1: pruned" in markdown(gather(study, ""))
