"""After the search: the finalists and the baseline are re-run, the best median is exported,
and the exported trial's own trace is the one kept as best_trace.json."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import TINY_ARGS, run_cli


def test_finalists_are_rerun_and_the_best_median_is_exported(tmp_path: Path) -> None:
    args = [a for a in TINY_ARGS if not a.startswith("window.profile")]
    proc = run_cli(["workload=mlp", "device=cpu", "study.name=c", "study.n_trials=5",
                    "study.prune=false", "study.confirm_runs=2", "study.confirm_top=2",
                    "window.profile=true", "window.profile_steps=1", *args], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "studies" / "c"
    doc = yaml.safe_load((out / "best.yaml").read_text())
    study = optuna.load_study(study_name="c", storage=f"sqlite:///{out}/study.db")
    conf = study.user_attrs["confirmation"]

    ranked = sorted((t for t in study.trials if t.value is not None),
                    key=lambda t: t.value, reverse=True)
    finals = conf["finalists"]
    assert len(finals) == 2 and finals[0] == ranked[0].number
    assert study.trials[finals[0]].user_attrs["knobs"] != study.trials[finals[1]].user_attrs["knobs"]
    assert all(len(conf["runs"][str(n)]) == 2 for n in (*finals, 0))  # baseline too

    medians = {n: statistics.median(conf["runs"][str(n)]) for n in finals}
    winner = max(medians, key=lambda n: medians[n])
    assert doc["best_trial"] == winner
    assert doc["knobs"] == study.trials[winner].user_attrs["knobs"]
    # (runs are stored rounded to 3 decimals, medians computed before rounding)
    assert doc["metrics"]["samples_per_sec"] == pytest.approx(medians[winner], abs=2e-3)
    base = statistics.median(conf["runs"]["0"])
    assert doc["speedup"] == pytest.approx(medians[winner] / base, abs=2e-3)
    assert doc["confirmation"]["finalists"] == finals
    assert "finalists re-run" in proc.stdout

    # Traces: only finalists keep theirs; best_trace.json is the exported trial's.
    kept = {int(p.parent.name) for p in (out / "trials").glob("*/trace.json")}
    assert winner in kept and kept <= set(finals)
    best_trace = (out / "best_trace.json").read_bytes()
    assert best_trace == (out / "trials" / str(winner) / "trace.json").read_bytes()
    assert "traceEvents" in json.loads(best_trace)


def test_publishing_the_same_trace_again_leaves_nothing_behind(tmp_path: Path) -> None:
    """Exports are rewritten after every trial, so the best trial's trace is published again
    and again: renaming a hard link onto another link of the same file is a no-op in POSIX,
    which left best_trace.json.tmp in the study folder."""
    from autotune.results.export import _publish_trace

    trace, dest = tmp_path / "trace.json", tmp_path / "best_trace.json"
    trace.write_text('{"traceEvents": []}')
    for _ in range(2):
        _publish_trace(trace, dest)
    assert dest.read_text() == trace.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best_trace.json", "trace.json"]
