"""What the documentation shows a run printing is what the code prints (fast tier: no study).

The excerpts of README.md, docs/getting-started.md and docs/guide/report.md are cut from one
recorded run of the README's command (docs/runs/resnet18-cpu/: its console, its study.db and
its trials' results) by benchmarks/excerpts.py's rules. Here the lines the excerpts take are
printed again, with today's code, from that recorded study: the header (cli/app), the plan and
the estimate (search/console/cost, estimate), each trial's lines (search/loop/driver), the
progress line (search/console/progress, the study as it stood after that trial), the
confirmation's verdict (search/confirmation/confirm) and the summary (search/console/summary,
then the report's line). Each must have the shape of the recorded line (its words; numbers
and clock times aside): a line the code prints in other words, or a line added to or dropped
from a block the excerpts show, fails here until ``python -m benchmarks.excerpts`` records a
new run (the README's excerpt stayed a run older than the summary's ``training:`` line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest

from benchmarks import excerpts

RECORD = excerpts.RECORD


def shape(line: str) -> str:
    """A line's words: every number (1,234.5, -3%, 05:19, 95%) read as #."""
    return re.sub(r"[-+]?\d[\d,]*(?:\.\d+)?", "#", line).rstrip()


def _logged(fn: Any, *args: Any) -> list[str]:
    """The lines ``fn`` logs to the autotune logger (the console's format: the message)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("autotune")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        fn(*args)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    return out.getvalue().splitlines()


def _printed(fn: Any, *args: Any) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue().splitlines()


def _study_as_of(study: optuna.Study, trials: list[Any]) -> optuna.Study:
    """The study as it stood when the last of ``trials`` finished (an in-memory copy)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    copy = optuna.create_study(directions=study.directions)
    for key, value in study.user_attrs.items():
        copy.set_user_attr(key, value)
    copy.add_trials(trials)
    return copy


@dataclasses.dataclass
class Replay:
    """Every line the code prints again for the recorded study, by (kind, key) as
    excerpts.tag names the console's lines."""

    lines: dict[tuple[str, int], str]
    blocks: dict[str, list[str]]


def replay(record: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> Replay:
    from autotune.cli import app
    from autotune.cli.compose import compose_config
    from autotune.core.env import Env
    from autotune.diagnose.verdicts import diagnose
    from autotune.measure.protocol import WindowResult
    from autotune.results.export import best_document
    from autotune.results.record import set_study_attrs, study_attrs, trial_attrs
    from autotune.results.trials import counts, measured
    from autotune.results.trust import could_not_measure
    from autotune.search.confirmation.confirm import _log as confirmed_words
    from autotune.search.console.cost import plan_words
    from autotune.search.console.estimate import estimate
    from autotune.search.console.progress import StudyProgress
    from autotune.search.console.summary import print_summary
    from autotune.search.loop.driver import outcome_words, trial_words
    from autotune.search.round_spread import round_spread
    from autotune.search.run import report_and_compare
    from autotune.search.units import in_study_unit

    console, run = excerpts.read_record(record)
    monkeypatch.chdir(work)
    out_dir = work / "studies" / excerpts.STUDY
    out_dir.mkdir(parents=True)
    shutil.copy(record / "study.db", out_dir / "study.db")
    storage = f"sqlite:///studies/{excerpts.STUDY}/study.db"  # as the run printed it
    study = optuna.load_study(study_name=excerpts.STUDY, storage=storage)
    # The confirmation's words as today's code decides them from the recorded rounds (the tie
    # and the undecided finalists are worded when the rounds end, and stored so).
    if study_attrs(study).get("confirmation"):
        set_study_attrs(study, {"confirmation": redecided(study_attrs(study)["confirmation"])})
    attrs = study_attrs(study)
    # The setup as the command line built it, on the recorded machine (its probe's answer).
    monkeypatch.setattr(app, "_probe", lambda requested: Env.from_dict(attrs["device"]))
    cfg = compose_config(run["command"])
    setup, workers, n_trials = app.build_setup(cfg, list(run["command"]))
    setup = dataclasses.replace(setup, round_spread=round_spread(
        setup.env.device, setup.env.device_name, setup.earlier))

    lines: dict[tuple[str, int], str] = {}
    blocks: dict[str, list[str]] = {}
    blocks["header"] = _printed(app._print_header, setup, workers,
                                app.cpu_defaults_words(cfg, setup.env.device))
    lines[("plan", 0)] = plan_words(setup, n_trials, setup.study.confirm_runs)
    trials = study.get_trials(deepcopy=False)
    done = 0
    for t in trials:
        a = trial_attrs(t)
        if "knobs" not in a:
            continue
        lines[("trial", t.number)] = trial_words(t.number, a["source"], a["knobs"], setup.space)
        result_json = record / "trials" / str(t.number) / "result.json"
        result = None
        if result_json.exists():
            result = in_study_unit(study, WindowResult.read(result_json))
        elif a.get("outcome") and a.get("outcome") != "ok":  # ended without a window's result
            outcome = str(a["outcome"])  # (a cached ceiling pruned it): its stored reason
            result = WindowResult(outcome=outcome, error=str(a.get("reason", "")).removeprefix(
                f"{outcome}: "))
        if result is not None:
            diag = (diagnose(result, a["knobs"], setup.env.device, setup.memory_limit_gb,
                             image_inputs=setup.image_inputs, domains=setup.space.domains)
                    if result.outcome == "ok" else None)
            said = outcome_words(t.number, result, setup.memory_limit_gb, diag)
            lines[("result", t.number)] = said[0]
            if len(said) > 1:
                lines[("diagnosis", t.number)] = said[1]
        if a.get("source") == "same_training":
            continue  # measured after the search: no progress line (search/run.py)
        progress = StudyProgress(n_trials, out_dir / "trials", stream=io.StringIO(), live=False)
        done += 1
        progress.done = done
        lines[("progress", t.number)] = progress.line(
            _study_as_of(study, [x for x in trials if x.number <= t.number]), t)
    wall = attrs.get("wall") or {}
    first = next((t for t in trials if measured(t)), None)
    if "first_trial_s" in wall and first is not None:
        lines[("estimate", 0)] = estimate(
            setup, n_trials, setup.study.confirm_runs, float(wall["setup_s"]),
            float(wall["first_trial_s"]), dict(trial_attrs(first))).words()
    if attrs.get("confirmation"):
        blocks["confirmed"] = _logged(confirmed_words, attrs["confirmation"], study)
    unmeasured = could_not_measure(study)
    if unmeasured is not None:  # search/run.py prints it to stderr, amid the summary
        lines[("verdict", 0)] = f"autotune: {unmeasured}"
    summary = _printed(print_summary, best_document(study, storage), counts(study), setup)
    summary += _printed(report_and_compare, setup, study, 0)
    blocks["summary"] = summary[1:] if summary[:1] == [""] else summary
    for kind, block in blocks.items():
        for key, text in enumerate(block):
            lines[(kind, key)] = text
    return Replay(lines, blocks)


def redecided(conf: dict[str, Any]) -> dict[str, Any]:
    """The recorded confirmation with both answers chosen and worded again by today's code,
    from its rounds (the candidates the selection had not dropped)."""
    from autotune.search.confirmation.choose import candidates_of, decide, decide_same

    conf = dict(conf)
    settled = candidates_of(conf, exclude={int(n) for n in conf.get("dropped") or []})
    decide(conf, settled)
    if "same_training" in conf:
        decide_same(conf, settled, conf["same_training"]["finalists"])
    return conf


def test_each_page_shows_what_its_rule_cuts_from_the_recorded_run() -> None:
    console, run = excerpts.read_record()
    for name, page in excerpts.PAGES.items():
        assert excerpts.current_block(name) == excerpts.block(name, console, run), (
            f"{page.path.name}'s excerpt is not the recorded run's: run "
            "python -m benchmarks.excerpts --from-record")


def test_every_excerpt_line_is_printed_by_todays_code(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    console, run = excerpts.read_record()
    tagged = excerpts.tag(console)
    again = replay(RECORD, tmp_path, monkeypatch)
    wrong = []
    for page in excerpts.PAGES.values():
        for ln in page.rule(tagged, run):
            said = again.lines.get((ln.kind, ln.key))
            if said is None or shape(said) != shape(ln.text):
                wrong.append(f"{page.path.name}, {ln.kind} {ln.key}:\n  recorded: {ln.text}\n"
                             f"  today:    {said}")
    # A block the excerpts show has as many lines as today's code prints (none added or gone).
    for kind, block in again.blocks.items():
        recorded = [ln.text for ln in tagged if ln.kind == kind]
        if any(ln.kind == kind for p in excerpts.PAGES.values() for ln in p.rule(tagged, run)) \
                and len(recorded) != len(block):
            wrong.append(f"the {kind}: {len(recorded)} lines recorded, today "
                         f"{len(block)}:\n  " + "\n  ".join(block))
    assert not wrong, ("the excerpts show lines today's code prints otherwise: run "
                       "python -m benchmarks.excerpts (alone: it runs the README's study)\n"
                       + "\n".join(wrong))


def test_the_shape_check_can_fail() -> None:
    assert shape("[1/12, 00:13 elapsed] trial 0 COMPLETE 128.7 samples/s (window spread 11%)") \
        == shape("[3/12, 10:02 elapsed] trial 2 COMPLETE 5,969.7 samples/s (window spread 3%)")
    assert shape("  samples/s  142.79") != shape("  samples/sec  142.79")
    lines = excerpts.tag(["autotune: study 'x' on cpu", "  workload: w", "trial 0 (baseline): a=1",
                          "trial 0: window contended (x): measuring again in 5s",
                          "trial 0: 2.9 samples/s, step 1.0 ms", "  diagnosis: d",
                          "[1/2, 00:01 elapsed] trial 0 COMPLETE", "", "study 'x': 1 trials",
                          "  report: r"])
    assert [(ln.kind, ln.key) for ln in lines] == [
        ("header", 0), ("header", 1), ("trial", 0), ("other", 0), ("result", 0),
        ("diagnosis", 0), ("progress", 0), ("other", 0), ("summary", 0), ("summary", 1)]
    assert excerpts.excerpt([lines[0], lines[1], lines[4]]) == [
        "autotune: study 'x' on cpu", "  workload: w", "...", "trial 0: 2.9 samples/s, step 1.0 ms"]
