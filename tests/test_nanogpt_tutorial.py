"""The nanoGPT-style tutorial (docs/guide/nanogpt.md, examples/nanogpt/): the page shows the
real difference between the script before and after the study, at most 10 changed lines; the
study, both scripts and ``autotune verify --script`` run as the page shows them, and no round
of verify asks for a ``meter.wrap(loader)`` the script cannot have."""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, child_env

FOLDER = ROOT / "examples" / "nanogpt"
PAGE = ROOT / "docs" / "guide" / "nanogpt.md"


def script_diff() -> str:
    """``diff -U1`` of the script before and after the study, as the page shows it."""
    before = (FOLDER / "train_original.py").read_text().splitlines(keepends=True)
    after = (FOLDER / "train.py").read_text().splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, "train_original.py", "train.py", n=1))


def changed(diff: str) -> tuple[list[str], list[str]]:
    """The added and removed lines of a unified diff that hold code (blank lines aside)."""
    lines = diff.splitlines()[2:]
    return ([ln[1:] for ln in lines if ln.startswith("+") and ln[1:].strip()],
            [ln[1:] for ln in lines if ln.startswith("-") and ln[1:].strip()])


def test_the_page_shows_the_real_difference_of_at_most_10_lines() -> None:
    diff = script_diff()
    shown = re.search(r"```diff\n(.*?)```", PAGE.read_text(), re.S)
    assert shown is not None and shown.group(1) == diff, "the page's diff is not the files'"
    added, removed = changed(diff)
    assert len(added) <= 10 and len(removed) <= len(added), (added, removed)
    assert "ctx = rt.autocast()" in added and "get_batch = rt.batches(get_batch)" in \
        " ".join(added)
    assert "examples/nanogpt/workload.py:workload" in PAGE.read_text()  # its code shown
    assert "nanogpt.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_diff_check_can_fail() -> None:
    added, removed = changed("--- a\n+++ b\n@@ -1 +1,2 @@\n-x = 1\n+x = 2\n+\n+y = 3\n")
    assert added == ["x = 2", "y = 3"] and removed == ["x = 1"]


def _run(args: list[str], cwd: Path, timeout: float = 540) -> str:
    proc = subprocess.run(args, cwd=cwd, env=child_env(AUTOTUNE_PROGRESS="lines"),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_the_tutorial_runs_as_written_and_under_verify(tmp_path: Path) -> None:
    """From an empty directory: the script as it was, the study, then ``autotune verify
    --script`` on the tuned script (its ctx entered at every step and in its evaluation, its
    optimizer's groups set, batches from get_batch), each side ending once verify's window is
    measured, before the script's last evaluation. Both sides' meters time the batches (``data_wait_share``), and no
    round's output asks for ``meter.wrap(loader)`` or warns that a measured loader knob does
    not apply (the workload's knob_limits keep the workers at 0)."""
    out = _run([sys.executable, str(FOLDER / "train_original.py"), "--steps", "4",
                "--eval-every", "4"], tmp_path)
    assert "step 4:" in out and "val loss" in out
    _run([sys.executable, str(FOLDER / "workload.py"), "--quick"], tmp_path)
    best = tmp_path / "studies" / "nanogpt" / "best.yaml"
    assert best.exists()
    _run([sys.executable, "-m", "autotune", "verify", str(best.parent), "--rounds", "1",
          "--script", str(FOLDER / "train.py"), "--steps", "72", "--eval-every", "72"],
         tmp_path)
    verified = json.loads((best.parent / "verify.json").read_text())
    assert verified["how"].startswith("train.py, your script")
    for side in ("baseline", "exported"):  # one round, another where a side ran beside a load
        for fig in verified["figures"][side]:
            assert fig["samples_per_sec"] > 0 and fig["data_wait_share"] is not None, fig
            assert fig["between_ms"] > 0 and fig["inside_ms"] > 0
    logs = [p.read_text() for p in sorted((best.parent / "verify").glob("*.log"))]
    # Each side ends once its window is measured: the evaluation at step 72 never runs.
    assert len(logs) >= 2 and not any("step 72:" in log for log in logs), logs
    said = "".join(logs)  # (a SlowerThanMeasured warning on a busy machine names a cause)
    assert "meter.wrap" not in said and "KnobOverridden" not in said, said[-3000:]
    assert "is not timed" not in said, said[-3000:]


def test_the_tutorial_is_tuned_from_its_train_py_alone(tmp_path: Path) -> None:
    """As the page's first commands: the study of train.py itself (no workload.py), its
    baseline the script's own values (batch 16, full precision, eager, no DataLoader worker
    searched), the script then trained under the best.yaml it names, and ``autotune verify
    studies/nanogpt`` running the same command, each side ending at its window."""
    from tests.conftest import BARE_ARGS

    script = str(FOLDER / "train.py")
    _run([sys.executable, "-m", "autotune", "study.name=nanogpt", "study.n_trials=2",
          *BARE_ARGS, "--", "python", script, "--steps", "300"], tmp_path)
    study = tmp_path / "studies" / "nanogpt"
    base = json.loads((study / "trials" / "0" / "request.json").read_text())
    assert base["knobs"]["batch_size"] == 16 and base["knobs"]["amp"] == "off"
    assert base["knobs"]["compile"] == "off" and base["knobs"]["num_workers"] == 0
    assert not (FOLDER / "studies").exists()  # written where the command ran
    out = _run([sys.executable, script, "--steps", "4", "--eval-every", "4"], tmp_path)
    assert "step 4:" in out
    _run([sys.executable, "-m", "autotune", "verify", str(study), "--rounds", "1", "--steps",
          "8", "--warmup", "2"], tmp_path)
    verified = json.loads((study / "verify.json").read_text())
    assert verified["how"].startswith("train.py, your script")
    assert all(f["steps"] == 10 for side in verified["figures"].values() for f in side)
