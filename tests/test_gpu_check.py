""".ci/gpu/gpu_check.sh rehearsed on the CPU (GPU_CHECK_DRY=1): the script a GPU loan runs
is proven here first: its steps, their timeouts, the $OUT layout (at most 8 files come back)
and the figures page."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / ".ci" / "gpu" / "gpu_check.sh"


def _rehearse(tmp_path: Path, script: Path = SCRIPT,
              **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=2400,
        env={**os.environ, "GPU_CHECK_DRY": "1", "OUT": str(out), "WORK": str(tmp_path / "work"),
             "PYTHON": sys.executable, **env})
    return proc, out


STEPS = ("study", "lm", "tests", "jpeg", "ncu", "figures", "compile", "race", "finetune",
         "script")


def _status(summary: str) -> dict[str, str]:
    return {line.split(":")[0]: line.split(":")[1].split()[0]
            for line in summary.splitlines() if ":" in line and line.split(":")[0] in STEPS}


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


@pytest.mark.timeout(2400)  # its steps' own budgets bound it; a busy machine takes longer
def test_the_loan_rehearses_every_step_on_the_cpu(tmp_path: Path) -> None:
    """The loan's one command (.ci/gpu/gpu_loan.sh): the check's steps (study, lm, tests,
    figures), then on the same machine compile, jpeg and ncu; at most 8 files come back."""
    # Budgets several times what each step takes idle (study ~80 s, lm ~60 s, jpeg ~40 s):
    # the rehearsal proves the plumbing, and a busy CI machine must not cut it.
    # One test file stands for the tests step: on the CPU every gpu-marked test skips, and the
    # step's plumbing (one pytest per file, its log and archive) is the same for one file as
    # for all of them.
    proc, out = _rehearse(
        tmp_path, SCRIPT.with_name("gpu_loan.sh"), CHECK_S="1400", LIMIT_S="2300",
        TOTAL_S="1380", BUDGET_study="600", BUDGET_lm="500", BUDGET_tests="200",
        BUDGET_figures="60", RERUN_BUDGET_compile="400", RERUN_BUDGET_jpeg="300",
        RERUN_BUDGET_ncu="60", TEST_FILES="tests/test_sync_rule.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    with tarfile.open(out / "rerun.tgz") as tar:
        tar.extractall(tmp_path / "rerun", filter="data")
    inner = tmp_path / "rerun" / "gpu_rerun"
    rerun = (inner / "summary.txt").read_text()
    status = _status(summary)
    # A study on 2 busy cores may end "could not measure" (exit 4): it ran through all the same.
    assert status.pop("study") in ("PASS", "DONE"), summary
    assert status.pop("lm") in ("PASS", "DONE"), summary
    assert status == {"tests": "PASS", "figures": "PASS"}, summary
    again = _status(rerun)
    assert again.pop("compile") in ("PASS", "DONE"), summary
    assert again == {"jpeg": "PASS", "ncu": "SKIP", "figures": "PASS"}, summary
    # The ncu step says why it could not run: a CPU study has no Nsight commands.
    assert "ncu: SKIP" in rerun and "profile CUDA devices only" in rerun
    # install.log: where optuna, hydra and nvtx were missing and installed from .whl/, as on a
    # GPU machine (.ci/gpu/gpu_image.sh rehearses with its software).
    files = sorted(p.name for p in out.iterdir())
    assert set(files) - {"install.log"} == {"figures.md", "lm.tgz", "rerun.tgz", "study.tgz",
                                           "summary.txt", "tests.tgz"}, files
    assert len(files) <= 8
    names = _names(out / "study.tgz")
    assert "logs/study.log" in names and "studies/gpu-resnet18/best.yaml" in names
    assert "studies/gpu-resnet18/trials.csv" in names
    assert not any(n.endswith("trace.json") for n in names)  # tens of MB on a GPU
    # The language model through the Hugging Face adapter, in tokens/s.
    assert "studies/gpu-lm/trials.csv" in _names(out / "lm.tgz")
    figures = (out / "figures.md").read_text()
    assert "## gpu-resnet18" in figures and "## gpu-lm" in figures and "tokens/s" in figures
    assert "3 rounds" in figures and "goal 22x" in figures and "wall time:" in figures
    assert "attention kernel their dtype cannot run: none" in figures
    assert "check: exit 0" in summary
    assert "confirmed" not in summary  # the summary is one line a step, the detail is in the logs
    # The second phase: the compile study pinned to the first study's export, the JPEG study.
    log = inner / "compile.tgz"
    compile_names = _names(log)
    assert "studies/gpu-compile/best.yaml" in compile_names, compile_names
    with tarfile.open(log) as tar:
        text = tar.extractfile("logs/compile.log").read().decode()  # type: ignore[union-attr]
    pinned = next(ln for ln in text.splitlines() if "pinned from studies/gpu-resnet18" in ln)
    assert " knobs.batch_size=" in pinned and "knobs.compile" not in pinned
    assert "## gpu-compile" in (inner / "figures.md").read_text()
    assert "## compile against the README command's baseline" in (inner / "figures.md").read_text()


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


@pytest.mark.timeout(1200)
def test_the_race_step_runs_the_old_and_the_new_path_and_returns_their_studies(
        tmp_path: Path) -> None:
    """The race step (a loan of its own, for the claim that a study ends within 1.5x of its
    search where windows are quiet): benchmarks.race's two studies of the README's workload,
    its table in the log, both studies' best.yaml in race.tgz."""
    proc, out = _rehearse(tmp_path, STEPS="race", TOTAL_S="1100", BUDGET_race="1000")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert _status(summary) == {"race": "PASS"}, summary
    names = _names(out / "race.tgz")
    assert {"studies/race/old/best.yaml", "studies/race/raced/best.yaml",
            "studies/race/old/trials.csv"} <= set(names), names
    with tarfile.open(out / "race.tgz") as tar:
        log = tar.extractfile("logs/race.log").read().decode()  # type: ignore[union-attr]
    assert "| rounds after the search (study.race=false) |" in log, log[-3000:]
    assert "| raced during the search |" in log


@pytest.mark.timeout(900)
def test_the_finetune_step_lists_what_imports_and_returns_its_study(tmp_path: Path) -> None:
    """The fine-tuning knobs' step: on the CPU none of Liger, flash-attn or
    bitsandbytes is listed (each said), and the Llama's study with padding-free packing
    searched runs through; its trials.csv comes back in finetune.tgz."""
    proc, out = _rehearse(tmp_path, STEPS="finetune", TOTAL_S="800", BUDGET_finetune="700")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = (out / "summary.txt").read_text()
    assert _status(summary)["finetune"] in ("PASS", "DONE"), summary
    names = _names(out / "finetune.tgz")
    assert "studies/gpu-finetune/trials.csv" in names, names
    with tarfile.open(out / "finetune.tgz") as tar:
        log = tar.extractfile("logs/finetune.log").read().decode()  # type: ignore[union-attr]
    for knob in ("knobs.liger_kernel", "knobs.attention", "knobs.optimizer"):
        assert f"not importable on cpu: {knob}" in log, log[-3000:]
    assert "padding_free" in log


def test_the_script_step_tunes_a_launched_script_and_verifies_it(tmp_path: Path) -> None:
    """The script step (autotune -- python examples/script_train.py ..., then autotune verify
    on the same command): its study and verify.json come back in script.tgz."""
    proc, out = _rehearse(tmp_path, STEPS="script", TOTAL_S="600", BUDGET_script="500")
    summary = (out / "summary.txt").read_text()
    assert _status(summary) == {"script": "PASS"}, summary + proc.stdout[-2000:]
    names = _names(out / "script.tgz")
    assert "studies/gpu-script/best.yaml" in names and "studies/gpu-script/verify.json" in names
