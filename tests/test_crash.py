"""An unexpected driver error ends an unattended run with one paragraph naming what failed and
where the traceback is; the study is intact and the same command resumes it."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from tests.conftest import TINY_ARGS, run_cli

ARGS = ["workload=mlp", "device=cpu", "study.name=crash", "study.confirm_runs=0", "study.numerics_steps=0", *TINY_ARGS]


def test_unwritable_export_fails_readably_and_the_study_resumes(tmp_path: Path) -> None:
    out = tmp_path / "studies" / "crash"
    (out / "best.yaml").mkdir(parents=True)  # the export path is unwritable: a directory
    (out / "best.yaml" / "keep").write_text("x")
    proc = run_cli([*ARGS, "study.n_trials=2"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr
    assert "Traceback" not in err, err[-3000:]
    paragraph = [ln for ln in err.splitlines() if ln.startswith("autotune: error:")]
    assert len(paragraph) == 1, err[-3000:]
    text = paragraph[0]
    assert "the study driver failed unexpectedly: IsADirectoryError" in text, text
    assert "autotune/results/export.py:" in text and "run the same command again to resume" in text
    tb_file = Path(text.split("the full traceback is in ")[1].split(". Finished")[0])
    assert tb_file.parent == out / "errors", tb_file
    assert "Traceback (most recent call last)" in tb_file.read_text()
    assert "atomic_write" in tb_file.read_text()

    storage = f"sqlite:///{out}/study.db"
    first = optuna.load_study(study_name="crash", storage=storage).trials
    assert [t.state for t in first] == [TrialState.COMPLETE]  # trial 0 kept, nothing RUNNING

    (out / "best.yaml" / "keep").unlink()
    (out / "best.yaml").rmdir()
    proc = run_cli([*ARGS, "study.n_trials=1"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = optuna.load_study(study_name="crash", storage=storage).trials
    assert len(trials) == 2 and trials[0].datetime_start == first[0].datetime_start
    assert (out / "best.yaml").is_file()
