"""Publishing a study to the experiment trackers teams read their runs in: MLflow, Weights &
Biases, TensorBoard (``tracking=[mlflow,wandb,tensorboard]``; ``autotune track STUDY``).

What is published is read from the study's Optuna storage and its folder alone, through the
same readers as best.yaml, trials.csv and the report (results/export.py, trials.py), so a
tracker shows the figures the report shows, for a finished study or one still running: one
parent run for the study (the workload, the device and the baseline's knobs as parameters; the
baseline's figure and each answer's speedup with its 95% interval as metrics; the nightly
comparison's verdict as tags; best.yaml, the report and trials.csv as artifacts) and one child
run per trial (its knobs as parameters; its figure, x baseline, median step time and peak
memory as metrics; its outcome and bottleneck as tags). ``study_run`` reads that record
(results/trackers.py's ``StudyRun``, plain data) and the writers there take it to each tracker.

Where each tracker writes, and with which credentials, is its own environment's
(MLFLOW_TRACKING_URI, WANDB_API_KEY / WANDB_MODE, AUTOTUNE_TENSORBOARD_DIR), never autotune's
config files, which are shared and committed. A tracker that is not installed or does not
answer is said once, in one line naming it, why and the fix, and the study goes on: its
results are in its folder and its storage whatever a tracker does.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.config import TRACKERS, tracker_names
from autotune.core.tokens import TOKENS, unit_of
from autotune.results.compare import verdict
from autotune.results.export import best_document, trials_rows
from autotune.results.record import study_attrs, trial_attrs
from autotune.results.storage import redact
from autotune.results.trackers import WRITERS, StudyRun, TrackerUnavailable, TrialRun
from autotune.results.trials import ANSWERS, baseline_trial, counts, over_limit

log = logging.getLogger("autotune")

#: What a study's folder holds that a tracker keeps beside the parent run, where it exists.
ARTIFACTS = ("best.yaml", "best-same-training.yaml", "best-any-training.yaml", "report.html",
             "report.md", "trials.csv")


def study_key(name: str, storage_url: str) -> str:
    """A short stable id for the study (name and storage, the password left out): the runs a
    tracker already holds for it are found by it, and W&B's run id is it."""
    return hashlib.sha1(f"{name}\n{redact(storage_url)}".encode()).hexdigest()[:16]


def outcome(t: FrozenTrial) -> str:
    """A trial's end in the words the summary counts it by: ok, over the memory limit, pruned,
    failed, or still running."""
    if t.state == TrialState.COMPLETE:
        return "over the memory limit" if over_limit(t) else (
            "ok" if trial_attrs(t).get("outcome") == "ok" else str(trial_attrs(t).get("outcome")))
    return {TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}.get(t.state, "running")


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def _number(value: Any) -> float | None:
    """A metric's value: a finite number, else None (a blank CSV cell, a missing figure)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out and abs(out) != float("inf") else None


def _metrics(pairs: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, raw in pairs.items() if (v := _number(raw)) is not None}


def trial_runs(study: optuna.Study) -> list[TrialRun]:
    """Every trial as a child run, from trials.csv's rows (export.trials_rows): the figures a
    tracker shows are the file's. x baseline is the trial's value over the baseline's, as the
    report's path to the best reads it."""
    base = baseline_trial(study)
    base_value = base.value if base is not None else None
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    out = []
    for row in trials_rows(study):
        t = trials[int(row["number"])]
        unit = unit_of(str(row.get("unit") or ""))
        figure = "tokens_per_sec" if unit == TOKENS else "samples_per_sec"
        measured = t.state == TrialState.COMPLETE and trial_attrs(t).get("outcome") == "ok"
        metrics = _metrics({
            figure: row.get(figure) if measured else None,
            "x_baseline": (t.value / base_value if measured and t.value and base_value else None),
            "step_time_ms": row.get("step_time_ms") if measured else None,
            "peak_memory_gb": row.get("peak_memory_gb"),
            "compile_s": row.get("compile_s") if measured else None})
        knobs = trial_attrs(t).get("knobs") or {}
        tags = {"autotune.trial": str(t.number), "state": t.state.name, "outcome": outcome(t),
                "source": str(row.get("source") or ""), "unit": unit,
                "bottleneck": str(row.get("bottleneck") or ""),
                "reason": str(row.get("reason") or "")[:1000],
                "changes_training": str(row.get("changes_training") or "")}
        out.append(TrialRun(t.number, t.state.name, {k: _text(v) for k, v in knobs.items()},
                            metrics, {k: v for k, v in tags.items() if v}))
    return out


def answer_metrics(study: optuna.Study, storage_url: str) -> tuple[dict[str, float],
                                                                    dict[str, str]]:
    """Each answer's figures (``any``: best.yaml's by default; ``same``: the fastest that trains
    the same model), read from the document best.yaml is written from: its speedup, the 95%
    interval of its confirmation rounds where it has one, its trial and its figure; and its
    speedup in words as a tag."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for answer in ANSWERS:
        doc = best_document(study, storage_url, answer)
        if doc is None:
            continue
        trial = str(doc["best_trial"])
        interval = (((doc.get("confirmation") or {}).get("intervals") or {}).get(trial) or {})
        unit = unit_of((doc.get("metrics") or {}).get("unit"))
        figure = "tokens_per_sec" if unit == TOKENS else "samples_per_sec"
        metrics.update(_metrics({
            f"{answer}.speedup": doc.get("speedup"),
            f"{answer}.speedup_ci_low": interval.get("ci_low"),
            f"{answer}.speedup_ci_high": interval.get("ci_high"),
            f"{answer}.trial": doc["best_trial"],
            f"{answer}.{figure}": (doc.get("metrics") or {}).get(figure)}))
        tags[f"{answer}.speedup_text"] = _text(doc.get("speedup_text"))
    return metrics, tags


def nightly_tags(comparison: dict[str, Any] | None) -> tuple[dict[str, float], dict[str, str]]:
    """The nightly comparison (study.compare_to, results/compare.py) as the parent's tags: the
    verdict in the report's words, and whether it is a regression."""
    if not comparison:
        return {}, {}
    if comparison.get("missing"):
        return {}, {"nightly.verdict": f"not compared: {comparison['missing']}"[:5000]}
    return _metrics({"nightly.change_pct": comparison.get("change_pct")}), {
        "nightly.compared_to": str(comparison["previous"]["name"]),
        "nightly.verdict": verdict(comparison)[:5000],
        "nightly.regression": str(bool(comparison.get("regression"))).lower()}


def study_run(study: optuna.Study, out_dir: Path, storage_url: str,
              comparison: dict[str, Any] | None = None) -> StudyRun:
    """The study as trackers take it (``StudyRun``), read from its storage and its folder."""
    attrs = study_attrs(study)
    unit = unit_of(attrs.get("unit"))
    figure = "tokens_per_sec" if unit == TOKENS else "samples_per_sec"
    dev = attrs.get("device") or {}
    base = baseline_trial(study)
    doc = best_document(study, storage_url)
    params = {"study": study.study_name, "storage": redact(storage_url),
              "workload": _text(attrs.get("workload")), "device": _text(dev.get("device")),
              "device_name": _text(dev.get("device_name")), "unit": unit,
              "training": _text(attrs.get("training") or "any"),
              "torch": _text(dev.get("torch_version")),
              **{f"baseline.{k}": _text(v) for k, v in
                 (trial_attrs(base).get("knobs") or {} if base else {}).items()}}
    n = counts(study)
    metrics = _metrics({f"baseline.{figure}": ((doc or {}).get("baseline") or {}).get(figure),
                        **{f"trials.{'total' if k == 'trials' else k}": v for k, v in n.items()}})
    answers, tags = answer_metrics(study, storage_url)
    night_metrics, night_tags = nightly_tags(comparison)
    return StudyRun(
        name=study.study_name, key=study_key(study.study_name, storage_url), out_dir=out_dir,
        unit_key=figure, params=params, metrics={**metrics, **answers, **night_metrics},
        tags={"autotune.study_id": study_key(study.study_name, storage_url), **tags,
              **night_tags},
        artifacts=[out_dir / f for f in ARTIFACTS if (out_dir / f).is_file()],
        trials=trial_runs(study), finished=not (n["running"] or any(
            t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))))


def stored_study(where: str, storage: str | None = None, name: str | None = None
                 ) -> tuple[optuna.Study, Path, str]:
    """The study ``autotune track`` names, its folder and its storage URL: ``where`` is its
    folder (holding study.db) or its name under studies/; with ``storage`` (any Optuna URL,
    else $AUTOTUNE_STORAGE for a folder without study.db) the study ``name`` there, else the
    folder's name. A ValueError says what was looked for and what is there."""
    import os

    from autotune.results.storage import ENV_VAR, StorageError, open_storage

    folder = Path(where) if Path(where).is_dir() else Path("studies") / where
    url = storage or (f"sqlite:///{folder / 'study.db'}" if (folder / "study.db").is_file()
                      else os.environ.get(ENV_VAR))
    if not url:
        raise ValueError(f"{where!r} is neither a study's folder holding study.db nor a study "
                         "name under studies/: name the folder, or give --storage URL (or "
                         f"${ENV_VAR}) and the study's name.")
    try:
        names = [s.study_name for s in optuna.get_all_study_summaries(open_storage(url))]
    except StorageError as exc:
        raise ValueError(str(exc)) from None
    wanted = name or (names[0] if len(names) == 1 and url.startswith("sqlite") else folder.name)
    if wanted not in names:
        raise ValueError(f"no study {wanted!r} in {redact(url)}; studies there: "
                         f"{', '.join(names) or 'none'}. Name one with --name.")
    return optuna.load_study(study_name=wanted, storage=open_storage(url)), folder, url


def publish(study: optuna.Study, out_dir: Path, storage_url: str, trackers: Any,
            comparison: dict[str, Any] | None = None) -> dict[str, str]:
    """Publish the study to each of ``trackers`` (TRACKERS' names); returns, per tracker, where
    it went or why not. Never raises for a tracker's sake: one that is missing or does not
    answer is one warning line, and the others are still published."""
    names = tracker_names(trackers)
    if not names:
        return {}
    try:
        run = study_run(study, Path(out_dir), storage_url, comparison)
    except Exception as exc:  # noqa: BLE001 - publishing never costs the study its result
        log.warning("tracking: the study could not be read for %s (%s: %s); its results are in "
                    "%s", ", ".join(names), type(exc).__name__, exc, out_dir)
        return {name: f"not published: {exc}" for name in names}
    done: dict[str, str] = {}
    for name in names:
        try:
            where = WRITERS[name](run)
        except TrackerUnavailable as exc:
            done[name] = f"not published: {exc}"
            log.warning("tracking: %s", exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a tracker's own error, said once
            said = redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:400]
            done[name] = f"not published: {said}"
            log.warning("tracking: %s: the study was not published (%s); its results are in %s "
                        "and its storage, and `autotune track %s tracking=[%s]` publishes them "
                        "again", name, said, out_dir, out_dir, name)
            continue
        done[name] = where
        log.info("tracking: %s: %s", name, where)
    return done


__all__ = ["ARTIFACTS", "TRACKERS", "StudyRun", "TrackerUnavailable", "TrialRun", "publish",
           "stored_study", "study_run"]
