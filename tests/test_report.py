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
from typing import Any

import optuna
import pytest

from tests.conftest import TINY_ARGS, child_env, run_cli

N_TRIALS = 4
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    cwd = tmp_path_factory.mktemp("report")
    # A machine without matplotlib's font cache, as on a user's first study: the report's plots
    # import optuna.visualization, which imports matplotlib, and its "generated new
    # fontManager" log line stays out of the user's output.
    proc = run_cli(["workload=mlp", "device=cpu", f"study.n_trials={N_TRIALS}", "study.name=rep",
                    "study.confirm_runs=1", "study.confirm_top=2", *TINY_ARGS], cwd,
                   env={"MPLCONFIGDIR": str(cwd / "no-font-cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cwd / "no-font-cache").is_dir()  # matplotlib was imported and built its cache
    assert "fontManager" not in proc.stdout + proc.stderr, proc.stdout[-2000:]
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
                   "## Diagnosis", verdict, "## Finalists' confirmation rounds",
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
    env = child_env()
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


# -- the loader profile and the Nsight commands, from a hand-made report document ---------------
# (no study run: gather()'s shape, copied by hand; an in-memory study for the plots' history)
def _frame(name: str, kind: str, share: float, where: str, calls: int = 64) -> dict[str, object]:
    return {"name": name, "kind": kind, "share": share, "where": where, "calls": calls}


def _profile(frames: list[dict[str, object]], summary: str) -> dict[str, object]:
    return {"summary": summary, "wait_share": 0.04, "total_s": 1.84, "batches": 8,
            "coverage": round(sum(float(f["share"]) for f in frames), 3),  # type: ignore[arg-type]
            "frames": frames, "getitem": {"where": "mydata/folder.py:42", "share": 0.91}}


BASE_PROFILE = _profile(
    [_frame("JPEG decode (PIL open+load)", "decode", 0.61, "PIL/ImageFile.py:243 (load)"),
     _frame("RandomResizedCrop", "transform", 0.18, "torchvision/transforms/transforms.py:970 (forward)"),
     _frame("<lambda> (folder.py:57)", "user", 0.06, "mydata/folder.py:57 (<lambda>)"),
     _frame("collate (default_collate)", "collate", 0.05, "torch/utils/data/_utils/collate.py:338")],
    "61% JPEG decode (PIL open+load), 18% RandomResizedCrop, 6% <lambda> (folder.py:57); 4% waiting")
BEST_PROFILE = _profile(
    [_frame("JPEG decode (PIL open+load)", "decode", 0.44, "PIL/ImageFile.py:243 (load)"),
     _frame("file read", "read", 0.21, "mydata/folder.py:50 (__getitem__)"),
     _frame("collate (default_collate)", "collate", 0.12, "torch/utils/data/_utils/collate.py:338")],
    "44% JPEG decode (PIL open+load), 21% file read, 12% collate (default_collate); 4% waiting")
CPU_NSIGHT = {"omitted": "the study ran on cpu, and Nsight Systems and Nsight Compute profile "
                         "CUDA devices only"}


def _hand_made(nsight: dict[str, object] | None, loader: bool = True) -> tuple[optuna.Study, dict]:
    study = optuna.create_study(direction="maximize")
    for v in (100.0, 180.0):
        study.add_trial(optuna.trial.create_trial(value=v))
    metrics = {"samples_per_sec": 180.0, "confirm_runs": [179.0, 181.0]}
    best = {
        "metrics": metrics, "baseline": {"samples_per_sec": 100.0}, "best_trial": 1,
        "speedup": 1.8, "ceilings": {"loader": 200.0}, "fraction_of_ceiling": 0.9,
        "study": {"name": "hand", "storage": "sqlite:///studies/hand/study.db"},
        "diagnosis": {"bottleneck": "input-bound", "summary": "waits on the loader", "fixes": []},
        "baseline_diagnosis": {"bottleneck": "input-bound", "summary": "waits", "fixes": ["more workers"]},
    }
    if loader:
        best["loader_profile"] = {"baseline": BASE_PROFILE, "best": BEST_PROFILE}
    if nsight is not None:
        best["nsight"] = nsight
    d = {
        "name": "hand", "workload": "jpeg_folder", "memory_limit_gb": 8.0, "best": best,
        "device": {"device": "cpu", "device_name": "x86", "torch_version": "2.5"},
        "counts": {"trials": 2, "complete": 2, "pruned": 0, "failed": 0, "running": 0, "infeasible": 0},
        "path": [{"trial": 0, "source": "baseline", "changed": {}, "samples_per_sec": 100.0,
                  "gain": None, "vs_baseline": 1.0, "bottleneck": "input-bound"},
                 {"trial": 1, "source": "sampler", "changed": {"num_workers": [0, 4]},
                  "samples_per_sec": 180.0, "gain": 1.8, "vs_baseline": 1.8, "bottleneck": "input-bound"}],
        "failures": [], "confirmation": [],
        "points": [{"trial": n, "samples_per_sec": v, "peak_memory_gb": 1.0, "feasible": True,
                    "shares": {"data_wait": 0.5, "h2d": 0.0, "compute": 0.4, "optimizer": 0.1},
                    "knobs": {}} for n, v in ((0, 100.0), (1, 180.0))],
        "baseline_evidence": {"data_wait": 0.5}, "best_evidence": {"data_wait": 0.3}, "n_trials": 2,
    }
    return study, d


def test_report_shows_the_loader_profile_and_no_nsight_on_a_cpu_study() -> None:
    from autotune.results.report_html import markdown, render_html

    study, d = _hand_made(CPU_NSIGHT)
    page = render_html(study, d)
    assert '"title":{"text":"Where the loader\'s time goes"}' in page  # the figure's own title
    study0, d0 = _hand_made(CPU_NSIGHT, loader=False)
    plots = len(re.findall(r'id="plot\d+"', page))
    assert plots == len(re.findall(r'id="plot\d+"', render_html(study0, d0))) + 1
    # Frame names are text: "<lambda>" escaped wherever it appears (lines, chart labels, hover).
    assert "<lambda>" not in page and "&lt;lambda&gt;" in page
    for label in ("baseline (trial 0)", "best (trial 1)"):
        assert label in page
    assert "mydata/folder.py:42" in page and "cProfile" in page
    # A CPU study's report has no section for a GPU tool (best.yaml says why it has none).
    assert "Nsight" not in page
    md = markdown(d)
    assert "61% JPEG decode (PIL open+load)" in md  # the hot frame, its share
    assert "`__getitem__` is at `mydata/folder.py:42`" in md  # the dataset's __getitem__
    assert "\\<lambda\\>" in md and "<lambda>" not in md  # text, not an HTML tag
    assert "cProfile" in md
    assert "Nsight" not in md
    assert md.index("## Diagnosis") < md.index("## Loader profile")
    md0 = markdown(d0)  # an older study: no loader_profile, no section, no chart named
    assert "## Loader profile" not in md0 and "where the loader" not in md0


def test_report_shows_the_nsight_commands_of_a_cuda_study() -> None:
    from autotune.results.nsight import nsight_commands
    from autotune.results.report_html import markdown, render_html

    doc = {"device": {"type": "cuda"}, "knobs": {"batch_size": 64, "amp": "bf16"},
           "study": {"name": "hand"}}
    kernel = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>(int)"
    ns = nsight_commands(doc, "autotune.workloads.mlp.MLPWorkload", [{"name": kernel, "ms_per_step": 1.5}])
    study, d = _hand_made(ns, loader=False)
    d["best"]["device"] = doc["device"]
    page = render_html(study, d)
    import html as html_lib

    pres = [html_lib.unescape(p) for p in re.findall(r"<pre>(.*?)</pre>", page, re.S)]
    assert ns["nsys"] in pres and ns["ncu"][0]["command"] in pres
    assert "&quot;knobs.amp=&#x27;bf16&#x27;&quot;" in page  # escaped inside the <pre>
    assert html_lib.escape(kernel) in page and "1.500 ms/step" in page
    md = markdown(d)
    assert f"```\n{ns['nsys']}\n```" in md and f"`{kernel}`: 1.500 ms/step" in md
    assert "Where the loader" not in page  # no loader profile: no chart


def test_loader_chart_opens_in_headless_chromium(tmp_path: Path) -> None:
    """The loader chart draws, with no console message (plotly.js warns, for one, about a hatch
    pattern on bars with per-bar colours)."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    from autotune.results.report_html import render_html

    study, d = _hand_made(CPU_NSIGHT)
    page = tmp_path / "report.html"
    page.write_text(render_html(study, d))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180)
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, console
    drawn = re.findall(r'id="plot(\d+)" class="[^"]*js-plotly-plot', dom.stdout)
    assert len(drawn) == len(re.findall(r'id="plot\d+"', page.read_text()))


def test_loader_chart_when_the_best_is_the_baseline_or_only_one_profile() -> None:
    from autotune.results import report_loader

    _, d = _hand_made(None)
    d["best"]["best_trial"] = 0  # the baseline won: one profile, one trace
    fig = report_loader.figure(d)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["baseline = best (trial 0)"]
    assert list(bars[0].y) == [report_loader._esc(f["name"]) for f in BEST_PROFILE["frames"]]
    _, d = _hand_made(None)
    d["best"]["loader_profile"] = {"baseline": None, "best": BEST_PROFILE}  # only the best waited
    assert [t.name for t in report_loader.figure(d).data if t.type == "bar"] == ["best (trial 1)"]
    d["best"]["loader_profile"] = None  # not input-bound: nothing at all
    assert report_loader.figure(d) is None and report_loader.markdown(d) == []
    assert report_loader.html_section(d) == ""


def test_importances_name_the_knobs_optuna_cannot_rank_and_warn_nobody() -> None:
    """A knob that exists only beside loader workers (prefetch_factor) has one trial in a regime
    after a short study: Optuna's UserWarning for it reached the terminal after the summary of a
    real 2-rank study (2026-11-27). The report's title says it; nothing is printed."""
    import warnings

    from optuna.distributions import CategoricalDistribution, IntDistribution

    from autotune.results.report_plots import _importances

    study = optuna.create_study(direction="maximize")
    workers = IntDistribution(0, 2)
    batch = CategoricalDistribution([16, 32, 64])
    prefetch = CategoricalDistribution([2, 4])
    for n, (w, b, value) in enumerate([(0, 16, 100.0), (0, 32, 150.0), (0, 64, 210.0),
                                       (2, 32, 160.0)]):
        params: dict[str, Any] = {"num_workers": w, "batch_size": b}
        dists: dict[str, Any] = {"num_workers": workers, "batch_size": batch}
        if w:
            params["prefetch_factor"], dists["prefetch_factor"] = 2, prefetch
        study.add_trial(optuna.trial.create_trial(value=value + n, params=params,
                                                  distributions=dists))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = _importances(study)
    assert made is not None
    title, fig = made
    assert "inaccurate for prefetch_factor" in title, title
    assert fig.data  # the chart itself is drawn
    assert not [w for w in caught if "regimes" in str(w.message)]


def test_importances_rank_what_the_top_trials_changed_not_what_no_trial_changed() -> None:
    """The gpt study of 2026-11-28, its 6 trials as stored: with Optuna's defaults the chart
    ranked cpu_threads first though every trial ran it at 2 (the top group was one trial).
    Batch 32 is what its top three share; a knob no trial changed is not drawn."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    from autotune.results.report_plots import _importances

    dists = {"cpu_threads": IntDistribution(1, 2), "num_workers": IntDistribution(0, 2),
             "batch_size": CategoricalDistribution([16, 32, 64]),
             "host_allocator": CategoricalDistribution(["default", "retain"])}
    study = optuna.create_study(direction="maximize")
    for workers, batch, alloc, value in [(0, 16, "default", 14081.7), (0, 16, "retain", 14253.2),
                                         (0, 32, "default", 16820.5), (1, 16, "retain", 12516.2),
                                         (0, 32, "retain", 18503.2), (0, 64, "default", 15114.5)]:
        params = {"cpu_threads": 2, "num_workers": workers, "batch_size": batch,
                  "host_allocator": alloc}
        study.add_trial(optuna.trial.create_trial(value=value, params=params, distributions=dists))
    made = _importances(study)
    assert made is not None
    title, fig = made
    assert "top 3 of 6 trials" in title and "knobs no trial changed are left out" in title
    ranked = dict(zip(fig.data[0].y, fig.data[0].x, strict=True))  # horizontal bars
    assert "cpu_threads" not in ranked
    assert max(ranked, key=ranked.get) == "batch_size", ranked


def test_memory_plot_keeps_the_trials_readable_beside_a_far_limit() -> None:
    """A limit 20x the largest peak is said in a note and the axis stays on the trials (drawn,
    it pressed them into one column); a limit near them, or one a trial went over, is drawn.
    Every point is labelled with its trial."""
    from autotune.results.report_plots import memory_figure

    def pts(*peaks: float, limit: float) -> list[dict[str, object]]:
        return [{"trial": n, "samples_per_sec": 100.0 + n, "peak_memory_gb": p,
                 "feasible": p <= limit} for n, p in enumerate(peaks)]

    far = memory_figure(pts(0.4, 0.5, limit=10.0), 10.0, "samples/s")
    assert far.layout.xaxis.range == (0, 0.575)
    assert not far.layout.shapes
    assert [a.text for a in far.layout.annotations] == [
        "memory limit 10.00 GB: off the chart, 20x the largest peak (0.50 GB)"]
    assert list(far.data[0].text) == ["#0", "#1"]
    for limit, peaks in ((0.9, (0.4, 0.5)), (0.45, (0.4, 0.5))):
        near = memory_figure(pts(*peaks, limit=limit), limit, "samples/s")
        assert near.layout.xaxis.range is None
        assert [s.x0 for s in near.layout.shapes] == [limit]
        assert f"memory limit {limit:.2f} GB" in near.layout.annotations[0].text
    over = memory_figure(pts(0.4, 0.5, limit=0.45), 0.45, "samples/s")
    assert [t.name for t in over.data] == ["within the limit", "over the limit"]


def _confirmed_study(runs: dict[str, list[float]]) -> optuna.Study:
    """Baseline (trial 0, 100/s), trial 1 (130/s, its window 10% noisy) raising the best, and
    trial 2 (135/s: within trial 1's noise, so it never raises the best in the search), then a
    confirmation of both finalists over 4 rounds with ``runs``."""
    from optuna.distributions import CategoricalDistribution

    from autotune.results.intervals import paired_speedup
    from autotune.results.record import set_study_attrs
    from autotune.search.confirmation.choose import candidates_of, decide, still_racing

    study = optuna.create_study(direction="maximize")
    dist = {"batch_size": CategoricalDistribution([32, 64, 128])}
    for n, (batch, value) in enumerate(((32, 100.0), (64, 130.0), (128, 135.0))):
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": batch}, distributions=dist, value=value,
            user_attrs={"knobs": {"batch_size": batch}, "outcome": "ok", "samples_per_sec": value,
                        "source": "baseline" if n == 0 else "agent", "peak_memory_gb": 1.0,
                        "ceiling_noise": {"window": 0.1}},
            system_attrs={"constraints": [-1.0]}))
    record: dict[str, Any] = {
        "method": "randomized interleaved rounds", "finalists": [2, 1], "baseline_trial": 0,
        "rounds": 4, "order": [[0, 1, 2]] * 4, "runs": runs,
        "contended": {n: [False] * 4 for n in runs},
        "intervals": {n: {**paired_speedup(runs[n], runs["0"]).as_dict(), "changed": 1,
                          "peak_memory_gb": 1.0} for n in ("1", "2")},
        "dropped": [], "stopped": "precision", "precision": 0.05, "budget_s": 300.0,
        "spent_s": 30.0, "window_noise": 0.01, "failures": []}
    set_study_attrs(study, {"confirmation": decide(record, still_racing(candidates_of(record)),
                                                   0.05)})
    return study


def test_the_path_to_the_best_ends_at_the_exported_trial() -> None:
    """The confirmation exported a trial that never raised the best in the search: the path
    ends at it, saying why (the gpt study of 2026-11-28 exported trial 4 while the path
    stopped at trial 2). Where the confirmation kept the user's configuration, the path ends
    back at the baseline; where the exported trial raised the best, nothing is added."""
    from autotune.results.report_data import path_to_best
    from autotune.results.report_html import markdown

    base = [100.0, 101.0, 99.0, 100.0]
    faster = _confirmed_study({"0": base, "1": [130.0, 131.0, 129.0, 130.0],
                               "2": [140.0, 141.0, 139.0, 140.0]})
    rows = path_to_best(faster)
    assert [r["trial"] for r in rows] == [0, 1, 2]
    assert rows[-1]["exported"] == "fastest" and rows[-1]["changed"] == {"batch_size": [64, 128]}
    from autotune.results.report_data import gather

    md = markdown(gather(faster, "sqlite:///x"))
    assert "exported: the confirmation rounds' fastest" in md
    # The confirmed speedup beside the search's, and what the export changes from yours.
    assert rows[-1]["confirmed"].startswith("1.40x (") and "confirmed" not in rows[0]
    assert "| 1.40x (" in md
    assert "Changed knobs: batch_size: 32 → 128" in md

    slower = _confirmed_study({"0": base, "1": [130.0, 131.0, 129.0, 130.0],
                               "2": [120.0, 121.0, 119.0, 120.0]})
    assert [(r["trial"], r.get("exported")) for r in path_to_best(slower)] == [(0, None), (1, None)]

    none = _confirmed_study({"0": base, "1": [80.0, 130.0, 90.0, 125.0],
                             "2": [85.0, 128.0, 92.0, 120.0]})
    rows = path_to_best(none)
    assert [(r["trial"], r.get("exported")) for r in rows][-1] == (0, "baseline"), rows


def test_a_best_above_its_ceiling_within_the_noise_is_said_so() -> None:
    """A ceiling is an upper bound: a best figure above it (within the window's noise, else a
    violation is recorded) says why, where it read "105% of the lowest" alone."""
    from autotune.results.report_html import markdown

    for fraction, said in ((0.9, "reaches 90% of the lowest\n"), (1.05, "reaches 105% of the "
                           "lowest (above it by less than the windows' noise")):
        study, d = _hand_made(CPU_NSIGHT)
        d["best"]["fraction_of_ceiling"] = fraction
        assert said in markdown(d), markdown(d)[:1500]


def test_a_report_written_after_verify_shows_the_realized_speedup(tmp_path: Path) -> None:
    """verify.json (what ``autotune verify`` writes beside best.yaml) in the report's headline,
    each answer's under its file's name."""
    from autotune.production.verify import Verified
    from autotune.results.intervals import paired_speedup
    from autotune.results.report_html import write_report

    study = _confirmed_study({"0": [100.0, 101.0, 99.0, 100.0], "1": [130.0, 131.0, 129.0, 130.0],
                              "2": [140.0, 141.0, 139.0, 140.0]})
    realized = paired_speedup([131.0, 133.0, 130.0], [100.0, 101.0, 99.0])
    done = Verified(realized, 1.4, "1.40x, 95% CI 1.38-1.42x, 4 rounds",
                    how="train.py, your script, as it is", counted=[0, 1, 2])
    (tmp_path / "verify.json").write_text(json.dumps(done.as_dict()))
    (tmp_path / "verify-best-same-training.json").write_text("{not json")  # left out
    write_report(study, tmp_path, "sqlite:///x")
    md = (tmp_path / "report.md").read_text()
    line = next(ln for ln in md.splitlines() if "Verified in your training" in ln)
    assert "(best.yaml): realized 1.31x, 95% CI 1.30-1.32x" in line and "train.py, your script" in line
    assert "94% of the study's" in line
    assert "best-same-training" not in md
    assert "Verified in your training (best.yaml)" in (tmp_path / "report.html").read_text()
