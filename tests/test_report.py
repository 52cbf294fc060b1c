"""What a study leaves for people: one progress line per trial, report.html/.md (opens in a real
headless Chromium with its plots and no console error), the on-demand report command, and the
study browsable in optuna-dashboard. One real tiny CPU study (through the CLI) feeds them all."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from tests.conftest import ROOT, TINY_ARGS, run_cli

N_TRIALS = 4
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    cwd = tmp_path_factory.mktemp("report")
    proc = run_cli(["workload=mlp", "device=cpu", f"study.n_trials={N_TRIALS}", "study.name=rep",
                    "study.confirm_runs=1", "study.confirm_top=2", *TINY_ARGS], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd / "studies" / "rep", proc.stdout


def test_non_interactive_progress_is_one_line_per_trial(study_dir: tuple[Path, str]) -> None:
    out_dir, stdout = study_dir
    lines = [ln for ln in stdout.splitlines() if re.match(r"\[\d+/\d+, ", ln)]
    assert len(lines) == N_TRIALS, stdout
    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{out_dir}/study.db")
    for i, (line, trial) in enumerate(zip(lines, study.trials, strict=True)):
        assert line.startswith(f"[{i + 1}/{N_TRIALS}, ") and "elapsed" in line, line
        assert f"] trial {trial.number} {trial.state.name if trial.state.name != 'COMPLETE' else ''}" in line
        if trial.state == optuna.trial.TrialState.COMPLETE:
            assert f"COMPLETE {trial.value:,.1f} samples/s" in line, line
        else:  # pruned or failed: the reason is on the line
            assert trial.user_attrs["reason"].split(": ", 1)[-1][:40] in line, line
        assert re.search(r"\d+ complete, \d+ pruned, \d+ infeasible, \d+ failed$", line), line
    assert "left" in lines[-1] and "best: trial " in lines[-1]
    assert "\x1b[" not in stdout  # no terminal control codes in a pipe


def test_report_md_tables_and_no_password(study_dir: tuple[Path, str], tmp_path: Path) -> None:
    out_dir, _ = study_dir
    md = (out_dir / "report.md").read_text()
    # The baseline's verdict is whatever the study measured (on a loaded machine the mlp may
    # read input-bound rather than compute-bound): the report must name that one.
    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{out_dir}/study.db")
    verdict = study.trials[0].user_attrs["diagnosis"]["bottleneck"]
    for needle in ("Baseline → best:", "speedup", "## Path to the best", "| 0 | baseline |",
                   "## Diagnosis", verdict, "## Finalists' confirmation runs",
                   "## Pruned, failed and infeasible trials", "Ceilings: loader"):
        assert needle in md, needle
    html = (out_dir / "report.html").read_text()
    # Self-contained: no script or stylesheet loaded from anywhere (plotly.js is inlined).
    assert not re.search(r"<script[^>]*\ssrc=|<link[^>]*\shref=", html)
    assert html.count("<script") >= 4
    # Any storage URL in the report goes through redact(): write one with a password.
    from autotune.results.report_html import write_report

    study = optuna.load_study(study_name="rep", storage=f"sqlite:///{out_dir}/study.db")
    write_report(study, tmp_path, "postgresql://tuner:pw-SENTINEL-99@db.example/autotune")
    for name in ("report.md", "report.html"):
        text = (tmp_path / name).read_text()
        assert "pw-SENTINEL-99" not in text and "tuner:***@db.example" in text, name


def test_report_command_on_a_stored_study(study_dir: tuple[Path, str], tmp_path: Path) -> None:
    out_dir, _ = study_dir
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "autotune.results.report_html", "--storage",
           f"sqlite:///{out_dir}/study.db"]
    proc = subprocess.run([*cmd, "--study", "rep", "--out", str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.html").stat().st_size > 100_000 and (tmp_path / "report.md").exists()
    proc = subprocess.run([*cmd, "--study", "nope"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2 and "'nope'" in proc.stderr and "Studies there: rep" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_opens_in_headless_chromium(study_dir: tuple[Path, str], tmp_path: Path) -> None:
    if CHROMIUM is None:
        if os.environ.get("CI") or os.environ.get("AUTOTUNE_REQUIRE_PG"):
            pytest.fail("chromium is not installed (CI installs it: .ci/run)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    out_dir, _ = study_dir
    url = (out_dir / "report.html").resolve().as_uri()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
            "--v=0", "--virtual-time-budget=8000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console  # no console message at all: no error, no warning
    # Each plot rendered by plotly.js: its div gets the "js-plotly-plot" class when drawn.
    drawn = re.findall(r'id="plot(\d+)" class="[^"]*js-plotly-plot', dom.stdout)
    assert len(drawn) >= 3, dom.stdout[-2000:]  # history, memory, breakdown (+ importances)
    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1280,2400", f"--screenshot={shot}", url],
                   capture_output=True, timeout=180)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def test_optuna_dashboard_serves_the_study(study_dir: tuple[Path, str]) -> None:
    pytest.importorskip("optuna_dashboard", reason="the dashboard extra: pip install -e '.[dashboard]'")
    out_dir, _ = study_dir
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from optuna_dashboard._cli import main; main()",
         f"sqlite:///{out_dir}/study.db", "--host", "127.0.0.1", "--port", str(port), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base, studies = f"http://127.0.0.1:{port}", None
        deadline = time.time() + 60
        while studies is None and time.time() < deadline:
            try:
                studies = _get(f"{base}/api/studies")
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.3)
        assert studies is not None, "optuna-dashboard did not answer in 60 s"
        entry = next(s for s in studies["study_summaries"] if s["study_name"] == "rep")  # type: ignore[index]
        detail = _get(f"{base}/api/studies/{entry['study_id']}")
        trials = detail["trials"]  # type: ignore[index]
        assert len(trials) == N_TRIALS
        states = {t["state"] for t in trials}
        assert states <= {"Complete", "Pruned", "Fail"}, states
        first = trials[0]
        attrs = {a["key"]: a["value"] for a in first["user_attrs"]}
        assert attrs["source"] == "baseline"
        assert json.loads(attrs["knobs"])["batch_size"] == 32  # nested dicts: readable JSON
        assert float(attrs["samples_per_sec"]) == pytest.approx(first["values"][0])
        assert {p["name"] for p in first["params"]} >= {"batch_size"}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
