"""The unit on the driver's side (issue 31 part 2): best.yaml, trials.csv, the report and the
nightly comparison say which unit their throughput is in, and never compare across units; a
study stored before units reads as samples/s. Real Optuna studies on SQLite, their trials
stored as a study stores them (no window runs here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.measure.protocol import WindowResult
from autotune.results.compare import compare_markdown, compare_studies
from autotune.results.export import best_document, trials_rows
from autotune.results.report_data import gather
from autotune.results.report_html import markdown
from autotune.results.trials import study_unit
from autotune.search.units import in_study_unit, result_line
from autotune.workloads.mlp import MLPWorkload


def _study(path: Path, name: str, unit: str | None, space: Any) -> optuna.Study:
    """A study with a baseline and a faster trial, stored in ``unit`` (None: before units)."""
    url = f"sqlite:///{path}"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    if unit:
        study.set_user_attr("unit", unit)
    for n, (rate, padding) in enumerate([(1000.0, 0.4), (1500.0, 0.1)]):
        attrs: dict[str, Any] = {
            "knobs": space.complete(space.searched({"batch_size": 32 * (n + 1)})),
            "outcome": "ok", "source": "baseline" if n == 0 else "sampler",
            "samples_per_sec": rate / 40, "peak_memory_gb": 0.5, "step_ms": {"median": 5.0}}
        if unit == "tokens/s":
            attrs |= {"unit": unit, "tokens_per_sec": rate, "padding_share": padding}
        study.add_trial(optuna.trial.create_trial(
            value=rate if unit == "tokens/s" else rate / 40, user_attrs=attrs,
            system_attrs={"constraints": [-1.0]}))
    return study


@pytest.fixture
def space(cpu_env: Env) -> Any:
    return build_space(cpu_env, MLPWorkload(), {"batch_size": [32, 64]})


def test_best_yaml_csv_and_report_say_tokens_per_second(tmp_path: Path, space: Any) -> None:
    study = _study(tmp_path / "t.db", "tok", "tokens/s", space)
    doc = best_document(study, "")
    assert doc is not None and doc["metrics"]["unit"] == "tokens/s"
    assert doc["metrics"]["tokens_per_sec"] == 1500.0 and doc["metrics"]["padding_share"] == 0.1
    assert doc["baseline"]["padding_share"] == 0.4
    rows = trials_rows(study)
    assert {r["unit"] for r in rows} == {"tokens/s"} and rows[1]["tokens_per_sec"] == 1500.0
    md = markdown(gather(study, ""))
    assert "1,000.0 → 1,500.0 tokens/s" in md and "baseline 40%, best 10%" in md
    assert "| trial | source | knobs changed | tokens/s |" in md


def test_a_study_stored_before_units_reads_as_samples_per_second(tmp_path: Path,
                                                                 space: Any) -> None:
    study = _study(tmp_path / "s.db", "old", None, space)
    assert study_unit(study) == "samples/s"
    doc = best_document(study, "")
    assert doc is not None and doc["metrics"]["unit"] == "samples/s"
    assert "tokens_per_sec" not in doc["metrics"] and doc["metrics"]["samples_per_sec"] == 37.5
    assert "samples/s (trial 1)" in markdown(gather(study, ""))


def test_nightly_comparison_refuses_across_units(tmp_path: Path, space: Any) -> None:
    """A tokens/s study against last night's samples/s one: flagged, no change computed."""
    db = tmp_path / "n.db"
    _study(db, "night1", None, space)
    tonight = _study(db, "night2", "tokens/s", space)
    c = compare_studies(tonight, "night1", f"sqlite:///{db}", 10.0)
    assert c["regression"] and c["change_pct"] is None
    assert "units differ: 'night1' measured samples/s, this study tokens/s" in c["reasons"][0]
    assert "| unit | samples/s | tokens/s |" in compare_markdown(c)
    same = compare_studies(tonight, "night2", f"sqlite:///{db}", 10.0)
    assert not same["regression"] and same["change_pct"] == 0.0


def test_a_trial_in_another_unit_fails_with_why(tmp_path: Path, space: Any) -> None:
    study = _study(tmp_path / "u.db", "mixed", "tokens/s", space)
    samples = WindowResult(outcome="ok", samples_per_sec=50.0)
    refused = in_study_unit(study, samples)
    assert refused.outcome == "crash" and "samples/s" in refused.error
    tokens = WindowResult(outcome="ok", unit="tokens/s", tokens_per_sec=900.0,
                          samples_per_sec=20.0, padding_share=0.25)
    assert in_study_unit(study, tokens) is tokens
    assert result_line(tokens, 1.0).startswith("900.0 tokens/s (20.0 samples/s, padding 25%)")
    fresh = optuna.create_study(direction="maximize")
    in_study_unit(fresh, tokens)
    assert study_unit(fresh) == "tokens/s"  # the first measured trial sets the study's unit


def test_ranks_sum_their_own_tokens_over_the_slowest_window(tmp_path: Path) -> None:
    """Each rank counts only its own batches (their lengths differ): the trial's real tokens
    are the sum, over the slowest rank's window, as samples are."""
    from autotune.measure.protocol import TrialRequest
    from autotune.measure.ranks import merge, rank_path

    out = tmp_path / "result.json"
    for rank, (tokens, computed, seconds) in enumerate([(900, 1000, 2.0), (700, 1000, 2.5)]):
        rank_path(out, rank).write_text(WindowResult(
            outcome="ok", unit="tokens/s", samples_per_sec=80 / seconds, measure_s=seconds,
            tokens=tokens, tokens_computed=computed, tokens_per_sec=2 * tokens / seconds).to_json())
    req = TrialRequest(workload={}, knobs={}, device="cpu", window={})
    merged = merge(req, out, 2, "")
    assert merged.measure_s == 2.5 and merged.tokens == 1600 and merged.tokens_computed == 2000
    assert merged.tokens_per_sec == pytest.approx(1600 / 2.5)
    assert merged.padding_share == pytest.approx(0.2)
