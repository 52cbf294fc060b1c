"""Nightly comparison: a study compared with an earlier, faster one is flagged as a regression
with exit code 3, its report shows both side by side, and it starts from the earlier best."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml

from autotune.results.compare import REGRESSION_EXIT
from tests.conftest import TINY_ARGS, run_cli

# Input-bound by construction: every item sleeps, in the training process (no workers), so the
# second study's 20x longer sleep makes it far slower whatever the machine's load.
SLEEPY = ["workload._target_=tests.workloads_diag.SleepyLoaderWorkload", "device=cpu",
          "knobs.num_workers=0", "study.n_trials=2", "study.confirm_runs=0", "study.numerics_steps=0", *TINY_ARGS,
          "window.min_measure_seconds=0.5"]


def test_slower_study_is_flagged_with_exit_code_3(tmp_path: Path) -> None:
    first = run_cli([*SLEEPY, "+workload.sleep_ms=1", "study.name=night1"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli([*SLEEPY, "+workload.sleep_ms=20", "study.name=night2",
                      "study.compare_to=night1", "study.start_from=night1"], tmp_path)
    assert second.returncode == REGRESSION_EXIT == 3, (second.returncode, second.stderr[-3000:])
    assert "compared with 'night1': REGRESSION: best samples/sec" in second.stdout, second.stdout
    md = (tmp_path / "studies" / "night2" / "report.md").read_text()
    assert "## Comparison with night1" in md and "**REGRESSION: best samples/sec" in md
    assert "| knobs.batch_size |" in md and "| torch |" in md  # configuration and versions
    assert "Comparison with night1" in (tmp_path / "studies" / "night2" / "report.html").read_text()
    # study.start_from: the earlier best is trial 1, right after the baseline.
    best1 = yaml.safe_load((tmp_path / "studies" / "night1" / "best.yaml").read_text())
    study = optuna.load_study(study_name="night2",
                              storage=f"sqlite:///{tmp_path}/studies/night2/study.db")
    t0, t1 = study.trials[:2]
    if best1["knobs"] == t0.user_attrs["knobs"]:  # the first night's best was its baseline
        assert t1.user_attrs["source"] != "start_from"  # trial 0 already measures it
    else:
        assert t1.user_attrs["source"] == "start_from"
        assert t1.user_attrs["knobs"] == best1["knobs"]


def test_a_missing_earlier_study_is_a_warning_and_the_night_still_runs(tmp_path: Path) -> None:
    """A schedule's first night (or the night after a missed one) names a study that never ran:
    the study runs without it, says so in the log and the report, and exits 0."""
    proc = run_cli([*SLEEPY, "+workload.sleep_ms=1", "study.name=n3", "study.compare_to=nightX",
                    "study.start_from=nightX"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: study.compare_to and study.start_from: study 'nightX'" in proc.stderr
    assert "study.compare_storage" in proc.stderr and "runs without it" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "studies" / "nightX").exists()
    md = (tmp_path / "studies" / "n3" / "report.md").read_text()
    assert "## Comparison" in md and "Not compared: study.compare_to and study.start_from" in md
    study = optuna.load_study(study_name="n3", storage=f"sqlite:///{tmp_path}/studies/n3/study.db")
    assert all(t.user_attrs.get("source") != "start_from" for t in study.trials)


def test_compare_storage_that_does_not_answer_is_a_usage_error(tmp_path: Path) -> None:
    """A storage that does not answer is not a first night: exit 2 before any trial, and the
    password stays out of the message."""
    url = "postgresql+psycopg://night:s3cretpw@127.0.0.1:9/autotune"
    proc = run_cli([*SLEEPY, "study.name=n4", "study.compare_to=nightX",
                    f"study.compare_storage={url}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "127.0.0.1:9" in proc.stderr and "s3cretpw" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "studies" / "n4" / "study.db").exists()
