"""Writing a study (results/tracking.py's ``StudyRun``) to each experiment tracker: MLflow,
TensorBoard, Weights & Biases. Each writer returns where the study went in words, or raises
``TrackerUnavailable`` (not installed, not reachable) with the one line the user reads.
``StudyRun`` and ``TrialRun`` are what each writer takes, as plain data (results/tracking.py
reads them from a stored study).

Each tracker is imported only here, only when named: none is a dependency of autotune
(``pip install 'autotune[mlflow]'``, ``[tensorboard]``, ``[wandb]``, ``[tracking]``: all
three). Publishing the same study again updates its runs rather than adding a copy: MLflow's
runs are found by their ``autotune.study_id`` tag, the W&B run is resumed by its id, and the
study's TensorBoard event files are written anew.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.results.storage import redact


class TrackerUnavailable(RuntimeError):
    """A tracker that cannot take the study: not installed, or not reachable. The message is
    the one line the user reads: the tracker, the reason and the fix."""


@dataclass
class TrialRun:
    """One trial as a child run: knobs as parameters, figures as metrics, words as tags."""

    number: int
    state: str  # Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]


@dataclass
class StudyRun:
    """A study as a tracker's parent run, and its trials as children. ``key`` names the study
    the same way on every publish (its name and storage), so that publishing it again, at the
    end of a resumed run or with ``autotune track``, updates the same runs."""

    name: str
    key: str
    out_dir: Path
    unit_key: str  # "samples_per_sec" or "tokens_per_sec": the figure's metric name
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    artifacts: list[Path] = field(default_factory=list)
    trials: list[TrialRun] = field(default_factory=list)
    finished: bool = True  # no trial running or waiting


#: The environment variable naming TensorBoard's log folder (TensorBoard has none of its own):
#: each study is written to <it>/<study name>; unset, to the study's own folder/tensorboard.
TENSORBOARD_DIR_ENV = "AUTOTUNE_TENSORBOARD_DIR"


def _missing(name: str, module: str, exc: ImportError) -> TrackerUnavailable:
    return TrackerUnavailable(
        f"{name}: not installed in this Python (no module named {exc.name or module!r}): "
        f"pip install 'autotune[{name}]'. The study's results are in its folder and storage; "
        f"`autotune track STUDY tracking=[{name}]` publishes them once it is installed")


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """These environment variables while the block runs, where the user has not set them."""
    added = [k for k in values if k not in os.environ]
    os.environ.update({k: values[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def to_mlflow(run: StudyRun) -> str:
    """The parent run (found by its ``autotune.study_id`` tag, else created) in the experiment
    MLFLOW_EXPERIMENT_NAME names (default ``autotune``), and a nested run per trial (MLflow's
    ``mlflow.parentRunId`` tag), at MLFLOW_TRACKING_URI (MLflow's own default where unset).
    Written through ``MlflowClient``, so an active run of the caller's is left alone."""
    try:
        import mlflow
        from mlflow import MlflowClient
    except ImportError as exc:
        raise _missing("mlflow", "mlflow", exc) from None
    uri = mlflow.get_tracking_uri()
    client = MlflowClient(tracking_uri=uri)
    # A server that does not answer is said in seconds: MLflow's own retries (7, backing off)
    # would hold the study's end for minutes. Only this first call is bounded.
    with _environ(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10"):
        try:
            experiment = _experiment(client, os.environ.get("MLFLOW_EXPERIMENT_NAME") or
                                     "autotune")
        except Exception as exc:  # noqa: BLE001 - any client error means it is unreachable
            raise TrackerUnavailable(
                f"mlflow: the tracking server at {redact(uri)} did not answer "
                f"({type(exc).__name__}: {redact(' '.join(str(exc).split()))[:200]}); set "
                "MLFLOW_TRACKING_URI to a running server or a sqlite:/// file. The study's "
                "results are in its folder and storage; `autotune track STUDY "
                "tracking=[mlflow]` publishes them later") from None
    parent = _find_or_create(client, experiment, f"tags.`autotune.study_id` = '{run.key}' and "
                             "tags.`autotune.role` = 'study'", run.name,
                             {"autotune.study_id": run.key, "autotune.role": "study"})
    _log(client, parent, run.params, run.metrics, run.tags)
    for path in run.artifacts:
        client.log_artifact(parent.info.run_id, str(path))
    children = {r.data.tags.get("autotune.trial"): r for r in client.search_runs(
        [experiment], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'", max_results=50000)}
    for trial in run.trials:
        child = children.get(str(trial.number)) or client.create_run(
            experiment, run_name=f"trial {trial.number}",
            tags={"mlflow.parentRunId": parent.info.run_id, "autotune.study_id": run.key,
                  "autotune.role": "trial"})
        _log(client, child, trial.params, trial.metrics, trial.tags)
        if trial.state not in ("RUNNING", "WAITING"):
            client.set_terminated(child.info.run_id,
                                  "FAILED" if trial.state == "FAIL" else "FINISHED")
    client.set_terminated(parent.info.run_id, "FINISHED" if run.finished else "RUNNING")
    return (f"run {parent.info.run_id} ({len(run.trials)} nested trial runs) in experiment "
            f"{experiment} at {redact(uri)}")


def _experiment(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    return str(found.experiment_id if found is not None else client.create_experiment(name))


def _find_or_create(client: Any, experiment: str, query: str, name: str,
                    tags: dict[str, str]) -> Any:
    found = client.search_runs([experiment], query, max_results=1)
    return found[0] if found else client.create_run(experiment, run_name=name, tags=tags)


def _log(client: Any, mlrun: Any, params: dict[str, str], metrics: dict[str, float],
         tags: dict[str, str]) -> None:
    """One run's parameters (those it has not got yet: MLflow's are written once), metrics
    and tags, in batches within MLflow's limits (100 parameters, 1000 entries a call)."""
    from mlflow.entities import Metric, Param, RunTag

    run_id, have = mlrun.info.run_id, mlrun.data.params
    new = [Param(k, v[:6000]) for k, v in params.items() if k not in have]
    for i in range(0, len(new), 100):
        client.log_batch(run_id, params=new[i:i + 100])
    now = _millis()
    entries = [Metric(k, v, now, 0) for k, v in metrics.items()]
    for i in range(0, len(entries), 1000):
        client.log_batch(run_id, metrics=entries[i:i + 1000])
    marks = [RunTag(k, v[:8000]) for k, v in tags.items()]
    for i in range(0, len(marks), 1000):
        client.log_batch(run_id, tags=marks[i:i + 1000])


def _millis() -> int:
    import time

    return int(time.time() * 1000)


def tensorboard_dir(run: StudyRun) -> Path:
    """Where the study's event files go: <AUTOTUNE_TENSORBOARD_DIR>/<study name>, else the
    study's folder's ``tensorboard``."""
    root = os.environ.get(TENSORBOARD_DIR_ENV)
    return Path(root) / run.name if root else run.out_dir / "tensorboard"


def to_tensorboard(run: StudyRun) -> str:
    """The study's scalars (each trial's figures at step = its trial number; the answers' at
    step 0) and its parameters and verdict as text in one folder, and each trial's knobs with
    its figures for the HParams dashboard (``add_hparams``, a subfolder per trial). The
    folder is the study's own: a publish replaces the event files an earlier one wrote, so
    its scalars are not drawn twice."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise _missing("tensorboard", "tensorboard", exc) from None
    folder = tensorboard_dir(run)
    if folder.exists():
        for old in folder.rglob("events.out.tfevents.*"):
            old.unlink()
    writer = SummaryWriter(log_dir=str(folder))
    try:
        for key, value in run.metrics.items():
            writer.add_scalar(f"study/{key}", value, 0)
        writer.add_text("study", _table({**run.params, **run.tags}), 0)
        for trial in run.trials:
            for key, value in trial.metrics.items():
                writer.add_scalar(f"trial/{key}", value, trial.number)
            writer.add_hparams(_hparams(trial), {f"hparam/{k}": v
                                                 for k, v in trial.metrics.items()},
                               run_name=f"trial-{trial.number:04d}", global_step=trial.number)
    finally:
        writer.close()
    return f"{folder} ({len(run.trials)} trials; tensorboard --logdir {folder.parent})"


def _hparams(trial: TrialRun) -> dict[str, Any]:
    """A trial's knobs, outcome and bottleneck as the HParams dashboard takes them (a number,
    a string or a bool; null is the word)."""
    out: dict[str, Any] = {"trial": trial.number, **trial.params}
    for key in ("outcome", "bottleneck", "source"):
        if key in trial.tags:
            out[key] = trial.tags[key]
    return out


def _table(values: dict[str, str]) -> str:
    rows = "\n".join(f"| {k} | {str(v).replace('|', '/')} |" for k, v in values.items())
    return f"| key | value |\n|---|---|\n{rows}"


def to_wandb(run: StudyRun) -> str:
    """One W&B run for the study (its id the study's key, resumed on a later publish; grouped
    by the study's name): its parameters as the config, the answers and the verdict in the
    summary, the trials as a table, and best.yaml, the report and trials.csv as an artifact.
    WANDB_MODE (offline: files under WANDB_DIR to ``wandb sync`` later), WANDB_PROJECT
    (default ``autotune``), WANDB_API_KEY and WANDB_ENTITY are W&B's own."""
    try:
        import wandb
    except ImportError as exc:
        raise _missing("wandb", "wandb", exc) from None
    try:
        wb = wandb.init(
            project=None if os.environ.get("WANDB_PROJECT") else "autotune", name=run.name,
            id=run.key, resume="allow", group=run.name, job_type="autotune-study",
            config=run.params, tags=["autotune", *(["regression"] if run.tags.get(
                "nightly.regression") == "true" else [])],
            settings=wandb.Settings(console="off", reinit="create_new", login_timeout=30,
                                    init_timeout=30))
    except Exception as exc:  # noqa: BLE001 - no key, no server: the user's to fix
        raise TrackerUnavailable(
            f"wandb: the run could not start ({type(exc).__name__}: "
            f"{redact(' '.join(str(exc).split()))[:300]}); check WANDB_API_KEY (or `wandb "
            "login`) and that W&B (WANDB_BASE_URL) answers, or set WANDB_MODE=offline to write "
            "the run to disk and `wandb sync` it later. The study's results are in its folder "
            "and storage") from None
    try:
        columns: list[str | int] = ["trial", "state", "outcome", run.unit_key, "x_baseline",
                                    "step_time_ms", "peak_memory_gb", "bottleneck", "knobs"]
        rows = [[t.number, t.state, t.tags.get("outcome"), t.metrics.get(run.unit_key),
                 t.metrics.get("x_baseline"), t.metrics.get("step_time_ms"),
                 t.metrics.get("peak_memory_gb"), t.tags.get("bottleneck"),
                 " ".join(f"{k}={v}" for k, v in t.params.items())] for t in run.trials]
        wb.log({"trials": wandb.Table(columns=columns, data=rows)})
        wb.summary.update({**run.metrics, **run.tags})
        if run.artifacts:
            artifact = wandb.Artifact(_artifact_name(run.name), type="autotune-study")
            for path in run.artifacts:
                artifact.add_file(str(path))
            wb.log_artifact(artifact)
        where = (f"offline, in {Path(wb.dir).parent}: `wandb sync` it"
                 if wb.settings.mode in ("offline", "dryrun") else wb.url)
    finally:
        wb.finish()
    return f"run {run.key} ({where})"


def _artifact_name(name: str) -> str:
    """A W&B artifact name (letters, digits, dashes, underscores, dots) for the study's files."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name) + "-results"


#: Each tracker's writer, by the name ``tracking`` gives it (core/config.py TRACKERS).
WRITERS: dict[str, Callable[[StudyRun], str]] = {
    "mlflow": to_mlflow, "tensorboard": to_tensorboard, "wandb": to_wandb}

