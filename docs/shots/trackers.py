"""Retake the experiment-tracker screenshots the documentation shows (docs/guide/trackers.md).

No study runs: in a temporary directory the README's recorded study (docs/runs/resnet18-cpu)
is copied twice, as ``studies/night-1`` and ``studies/night-2``, a nightly pair; the real CLI
publishes both, night-2 with its comparison to night-1 (``autotune track studies/night-2
tracking=[mlflow,tensorboard] --compare-to night-1``), to an MLflow sqlite file and a
TensorBoard log folder there. Then ``mlflow ui`` and ``tensorboard`` serve them on free local
ports and headless Chromium screenshots their pages: MLflow's runs of the experiment (its
chart view: each metric of the two nights side by side), the night-2 parent run with its
``nightly.*`` tags, and TensorBoard's scalars of the two nights. The servers are stopped
whatever happens; nothing is fetched from the network (MLflow's telemetry is turned off)::

    python docs/shots/trackers.py      # about 30 s on 2 CPU cores (Linux: see MLFLOW_HOST)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: The README's recorded study (its Optuna study is named as its folder) and the nights made of it.
RECORDED = ROOT / "docs" / "runs" / "resnet18-cpu"
NIGHTS = ["night-1", "night-2"]
#: What a study's folder holds that publishing attaches to the parent run (tracking.ARTIFACTS).
ARTIFACTS = ("best.yaml", "best-same-training.yaml", "best-any-training.yaml", "report.html",
             "report.md", "trials.csv")
WIDTH, HEIGHT = 1400, 900
#: Virtual time Chromium gives a page's scripts to render (both UIs are single-page apps).
BUDGET_MS = 15000
#: Where ``mlflow ui`` listens. Not 127.0.0.1 or localhost: on those MLflow 3's UI opens its
#: "MLflow Assistant" panel over a third of the page on a first visit (a local server's only).
#: Any 127.x address is the loopback on Linux; MLflow is told to accept the address as a host
#: and an origin (its DNS-rebinding and CORS checks let only localhost through by default).
MLFLOW_HOST = "127.0.0.2"
#: The pages, past each UI's address. MLflow: the Model training view (its default is the GenAI
#: one, which has no runs table), the runs in the chart view, then the night-2 parent run.
#: TensorBoard: the two nights' runs (not the per-trial HParams sessions), trial/ scalars and
#: night-2's nightly change, unsmoothed and with no point cut as an outlier.
MLFLOW_RUNS = "#/experiments/{experiment}/runs?workflowType=machine_learning&compareRunsMode=CHART"
MLFLOW_RUN = "#/experiments/{experiment}/runs/{run}?workflowType=machine_learning"
TENSORBOARD = ("#scalars&regexInput=%5Enight-%5Cd%24&_smoothingWeight=0"
               "&tagFilter=trial%2F(samples_per_sec%7Cx_baseline%7Cstep_time_ms)%7Cnightly")
#: TensorBoard reads "Ignore outliers in chart scaling" (on by default) from the page's
#: localStorage only, not from the URL; on, it cut the best trials' points off the charts.
#: The page is served through a local relay that sets it off before TensorBoard's own scripts.
TB_SETTINGS = b'<script>localStorage.setItem("_ignoreYOutliers", "false")</script>'



def make_nights(work: Path) -> None:
    """studies/night-1 and studies/night-2: the recorded study's storage and files, each
    under its night's name."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for night in NIGHTS:
        folder = work / "studies" / night
        folder.mkdir(parents=True)
        optuna.copy_study(from_study_name=RECORDED.name,
                          from_storage=f"sqlite:///{RECORDED / 'study.db'}",
                          to_storage=f"sqlite:///{folder / 'study.db'}", to_study_name=night)
        for name in ARTIFACTS:
            if (RECORDED / name).is_file():
                shutil.copy(RECORDED / name, folder / name)


def publish(work: Path, env: dict[str, str]) -> None:
    """Both nights through the real CLI: night-1 alone, night-2 compared to night-1."""
    for night, extra in (("night-1", []), ("night-2", ["--compare-to", "night-1"])):
        cmd = [sys.executable, "-m", "autotune", "track", f"studies/{night}",
               "tracking=[mlflow,tensorboard]", *extra]
        print("$", " ".join(cmd[1:]), flush=True)
        done = subprocess.run(cmd, cwd=work, env=env)
        if done.returncode != 0:
            raise SystemExit(f"autotune track {night} failed (exit {done.returncode})")


def _tool(name: str) -> str:
    """A console script of this Python's environment (.venv/bin/mlflow), else on PATH."""
    beside = Path(sys.executable).parent / name
    exe = str(beside) if beside.is_file() else shutil.which(name)
    if exe is None:
        sys.exit(f"{name} is not installed in this Python (pip install 'autotune[tracking]')")
    return exe


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    return exe


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read()
    except (urllib.error.URLError, OSError):
        return None


@contextmanager
def server(cmd: list[str], cwd: Path, env: dict[str, str], ready: str, until: bytes = b"",
           timeout: float = 120) -> Iterator[None]:
    """``cmd`` running in its own process group until the block ends (then stopped, group and
    all: ``mlflow ui`` starts workers), once ``ready`` answers with ``until`` in its body."""
    log = (cwd / f"{Path(cmd[0]).name}.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            body = _answers(ready)
            if body is not None and until in body:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{' '.join(cmd)} did not answer at {ready} (exit "
                                 f"{proc.poll()}); its output is in {log.name}")
            time.sleep(1)
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@contextmanager
def relay(target: str, head: bytes) -> Iterator[str]:
    """``target`` (a local server) at another local address, as it is, but for ``head``
    inserted at the top of its pages' <head>: a UI setting a page keeps only in its
    localStorage, set before the UI's scripts read it. Yields the relay's address."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() in ("content-type", "accept", "x-xsrf-protected")}
            request = urllib.request.Request(target + self.path, data=body, headers=headers,
                                             method=self.command)
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    status, kind, data = r.status, r.headers.get("Content-Type", ""), r.read()
            except urllib.error.HTTPError as e:
                status, kind, data = e.code, e.headers.get("Content-Type", ""), e.read()
            if kind.startswith("text/html"):
                data = data.replace(b"<head>", b"<head>" + head, 1)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()


def screenshot(url: str, name: str, work: Path, height: int = HEIGHT) -> None:
    """``url`` as headless Chromium draws it, saved as docs/shots/<name>."""
    from PIL import Image

    shot = work / name
    # Without --run-all-compositor-stages-before-draw, about one shot in five of MLflow's
    # chart view caught its charts still loading (spinners): the page drew before they did.
    subprocess.run([_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--run-all-compositor-stages-before-draw",
                    f"--virtual-time-budget={BUDGET_MS}",
                    f"--user-data-dir={work / 'profile'}", f"--window-size={WIDTH},{height}",
                    f"--screenshot={shot}", url], check=True, capture_output=True, timeout=180)
    Image.open(shot).convert("RGB").save(HERE / name, optimize=True)
    print(f"wrote {HERE / name} ({url})", flush=True)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="tracker-shots-"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_EXPERIMENT_NAME", "AUTOTUNE_STORAGE")}
    env.update(PYTHONPATH=str(ROOT), MLFLOW_TRACKING_URI=f"sqlite:///{work / 'mlflow.db'}",
               AUTOTUNE_TENSORBOARD_DIR=str(work / "tb"), MLFLOW_DISABLE_TELEMETRY="true",
               DO_NOT_TRACK="true")
    make_nights(work)
    publish(work, env)

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    found = client.get_experiment_by_name("autotune")
    if found is None:
        raise SystemExit("autotune track published no MLflow experiment named autotune")
    experiment = found.experiment_id
    parent = client.search_runs([experiment], "tags.`autotune.role` = 'study' and "
                                "attributes.run_name = 'night-2'", max_results=1)[0]
    print("night-2's verdict:", parent.data.tags.get("nightly.verdict"), flush=True)

    port = _free_port(MLFLOW_HOST)
    base = f"http://{MLFLOW_HOST}:{port}"
    # Run where the studies were published: MLflow's artifacts are in ./mlruns beside it.
    with server([_tool("mlflow"), "ui", "--backend-store-uri", env["MLFLOW_TRACKING_URI"],
                 "--host", MLFLOW_HOST, "--port", str(port), "--workers", "1",
                 "--allowed-hosts", f"{MLFLOW_HOST}:{port}", "--cors-allowed-origins", base],
                work, env, f"{base}/health"):
        screenshot(f"{base}/{MLFLOW_RUNS.format(experiment=experiment)}", "mlflow-runs.png",
                   work)
        screenshot(f"{base}/{MLFLOW_RUN.format(experiment=experiment, run=parent.info.run_id)}",
                   "mlflow-parent-run.png", work)

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with server([_tool("tensorboard"), "--logdir", str(work / "tb"), "--host", "127.0.0.1",
                 "--port", str(port)], work, env, f"{base}/data/runs", b"night-2"), \
            relay(base, TB_SETTINGS) as page:
        screenshot(f"{page}/{TENSORBOARD}", "tensorboard.png", work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
