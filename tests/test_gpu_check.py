"""benchmarks/gpu_check.sh rehearsed on the CPU (GPU_CHECK_DRY=1): the script a GPU loan runs
is proven here first: its steps, their timeouts, the $OUT layout (at most 8 files come back)
and the figures page."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _rehearse(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=1500,
        env={**os.environ, "GPU_CHECK_DRY": "1", "OUT": str(out), "WORK": str(tmp_path / "work"),
             "PYTHON": sys.executable, **env})
    return proc, out


def _status(summary: str) -> dict[str, str]:
    return {line.split(":")[0]: line.split(":")[1].split()[0]
            for line in summary.splitlines() if ":" in line and line.split(":")[0] in
            ("study", "tests", "jpeg", "ncu", "figures", "compile")}


def test_the_gpu_check_rehearses_every_step_on_the_cpu(tmp_path: Path) -> None:
    # Budgets several times what each step takes idle (study ~80 s, jpeg ~40 s): the rehearsal
    # proves the plumbing, and a busy CI machine must not cut it.
    # One test file stands for the tests step: on the CPU every gpu-marked test skips, and the
    # step's plumbing (one pytest per file, its log and archive) is the same for one file as
    # for all eleven (which cost 45 s of collection here).
    proc, out = _rehearse(tmp_path, TOTAL_S="1200", BUDGET_study="600", BUDGET_jpeg="300",
                          BUDGET_tests="200", BUDGET_figures="60",
                          TEST_FILES="tests/test_sync_rule.py")
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    status = _status(summary)
    # A study on 2 busy cores may end "could not measure" (exit 4): it ran through all the same.
    assert status.pop("study") in ("PASS", "DONE"), summary
    assert status == {"tests": "PASS", "jpeg": "PASS", "ncu": "SKIP", "figures": "PASS"}, summary
    # The ncu step says why it could not run: a CPU study has no Nsight commands.
    assert "ncu: SKIP" in summary and "profile CUDA devices only" in summary
    # install.log: where optuna, hydra and nvtx were missing and installed from .whl/, as on a
    # GPU machine (benchmarks/gpu_image.sh rehearses with its software).
    files = sorted(p.name for p in out.iterdir() if p.name != "install.log")
    assert files == ["figures.md", "jpeg.tgz", "ncu.tgz", "study.tgz", "summary.txt", "tests.tgz"]
    assert len(files) <= 8
    with tarfile.open(out / "study.tgz") as tar:
        names = tar.getnames()
    assert "logs/study.log" in names and "studies/gpu-resnet18/best.yaml" in names
    assert "studies/gpu-resnet18/trials.csv" in names
    assert not any(n.endswith("trace.json") for n in names)  # tens of MB on a GPU
    figures = (out / "figures.md").read_text()
    assert "## gpu-resnet18" in figures and "## gpu-jpeg" in figures
    assert "3 rounds" in figures and "goal 22x" in figures and "wall time:" in figures
    assert "confirmed" not in summary  # the summary is one line a step, the detail is in the logs


def test_a_step_past_its_budget_is_cut_and_still_returns_what_it_has(tmp_path: Path) -> None:
    """A step cut by its own timeout is TIMEOUT in the summary, its archive holds its log, and
    the figures step still runs: a loan cut short keeps what was measured."""
    proc, out = _rehearse(tmp_path, STEPS="study figures", BUDGET_study="6")
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _status(summary) == {"study": "TIMEOUT", "figures": "PASS"}, summary
    assert "cut at 6s" in summary
    with tarfile.open(out / "study.tgz") as tar:
        assert "logs/study.log" in tar.getnames()
    assert (out / "figures.md").exists()
