"""The tutorials' code runs as the pages show it (docs/tutorials/*.py, included verbatim in the
pages by pymdownx.snippets): a renamed key or a changed signature fails here, not for a user.
Each runs a real short study on the CPU in an empty directory, with the numerics check on and
the confirmation asked for its default precision: what a user copies from a tutorial keeps
both (short windows and a short confirmation budget are what make it short)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.cli.config import StudyConfig
from tests.conftest import ROOT, child_env

TUTORIALS = {
    "quickstart.py": ("quickstart", "getting-started.md"),
    "hf_trainer.py": ("hf-trainer-docs", "guide/huggingface.md"),
    "finetune_sft.py": ("sft-lora-docs", "guide/finetuning.md"),
    "lightning_module.py": ("lightning-docs", "guide/lightning.md"),
    "own_workload.py": ("my-model-docs", "guide/own-workload.md"),
}


@pytest.mark.parametrize("script", sorted(TUTORIALS))
def test_tutorial_runs_as_written(script: str, tmp_path: Path) -> None:
    study, page = TUTORIALS[script]
    # The page shows the file the suite runs: included, or a copy tests/test_docs_code.py
    # keeps equal to it.
    text = (ROOT / "docs" / page).read_text()
    assert (f'--8<-- "docs/tutorials/{script}"' in text
            or f"<!-- code: docs/tutorials/{script} (" in text), page
    env = child_env(AUTOTUNE_PROGRESS="lines")
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "tutorials" / script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / study / "best.yaml").read_text())
    assert best["speedup_text"] and best["knobs"]
    assert (tmp_path / "studies" / study / "report.html").exists()
    # The numerics check ran, and the confirmation asked for the default precision. On a
    # busy machine a tutorial's other trials can all be pruned: then there is nothing to
    # confirm the user's configuration against, and the study says so (CI, 2026-11-28).
    assert best["numerics"]["steps"] == StudyConfig.numerics_steps > 0
    if best["confirmation"] is None:
        assert "no confirmation: the baseline (trial 0) is the only finalist" in proc.stderr + \
            proc.stdout, proc.stderr[-3000:]
    else:
        assert best["confirmation"]["precision"] == StudyConfig.confirm_precision


@pytest.mark.parametrize("script", sorted(TUTORIALS))
def test_tutorial_keeps_the_numerics_check_and_the_default_precision(script: str) -> None:
    text = (ROOT / "docs" / "tutorials" / script).read_text()
    if script == "quickstart.py":  # and the notebook, checked once
        text += (ROOT / "docs" / "tutorials" / "notebook.ipynb").read_text()
    for key in ("study.numerics_steps", "study.confirm_precision", "study.confirm_runs"):
        assert key not in text, f"{script} overrides {key}: a user would copy it"
