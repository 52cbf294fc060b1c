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
    from autotune.results.export import best_document
    from autotune.results.record import set_study_attrs, study_attrs, trial_attrs
    from autotune.results.trials import counts, measured
    from autotune.results.trust import could_not_measure
    from autotune.search.confirmation.words import confirming_line
    from autotune.search.console.cost import plan_brief
    from autotune.search.console.estimate import estimate
    from autotune.search.console.progress import StudyProgress
    from autotune.search.console.summary import print_summary
    from autotune.search.round_spread import round_spread
    from autotune.search.run import report_and_compare

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
    blocks["header"] = [*_logged(app.print_header, setup, workers,
                                 app.cpu_defaults_words(cfg, setup.env.device)),
                        plan_brief(setup, n_trials, setup.study.confirm_runs)]
    trials = study.get_trials(deepcopy=False)
    done = 0
    for t in trials:
        a = trial_attrs(t)
        if "knobs" not in a or a.get("source") == "same_training":
            continue  # the same-training trial runs after the search: no line (search/run.py)
        progress = StudyProgress(n_trials, out_dir / "trials", stream=io.StringIO(), live=False)
        done += 1
        progress.done = done
        lines[("progress", t.number)] = progress.brief(
            _study_as_of(study, [x for x in trials if x.number <= t.number]), t)
    wall = attrs.get("wall") or {}
    first = next((t for t in trials if measured(t)), None)
    if "first_trial_s" in wall and first is not None:
        lines[("estimate", 0)] = estimate(
            setup, n_trials, setup.study.confirm_runs, float(wall["setup_s"]),
            float(wall["first_trial_s"]), dict(trial_attrs(first))).brief()
    conf = attrs.get("confirmation") or {}
    if conf.get("finalists"):
        base = int(conf["baseline_trial"])
        lines[("confirming", 0)] = confirming_line(
            [int(n) for n in conf["finalists"] if int(n) != base], base,
            setup.study.confirm_budget_s)
        lines.update(replayed_rounds(conf))
    unmeasured = could_not_measure(study)
    if unmeasured is not None:  # search/run.py prints it to stderr, amid the summary
        lines[("verdict", 0)] = f"autotune: {unmeasured}"
    summary = _logged(print_summary, best_document(study, storage), counts(study), setup)
    summary += _logged(report_and_compare, setup, study, 0)
    blocks["summary"] = summary[1:] if summary[:1] == [""] else summary
    for kind, block in blocks.items():
        for key, text in enumerate(block):
            lines[(kind, key)] = text
    return Replay(lines, blocks)


def replayed_rounds(conf: dict[str, Any]) -> dict[tuple[str, int], str]:
    """Each round's line as words.round_line says it, from the recorded rounds: after round k,
    each finalist not yet dropped with its interval over its first k windows (the leader's
    shown), and those dropped after their last window, in round k. The seconds are the
    expected round's (the shape check reads any number as any other); the seconds still
    expected, each round's recorded forecast."""
    from autotune.search.confirmation.choose import Candidate, interval_of
    from autotune.search.confirmation.words import round_line

    base = int(conf["baseline_trial"])
    runs = {int(n): list(r) for n, r in (conf.get("runs") or {}).items()}
    busy = {int(n): list(c) for n, c in (conf.get("contended") or {}).items()}
    dropped = {int(n) for n in conf.get("dropped") or []}

    def last(n: int) -> int:  # the round of a finalist's last window
        return max((i + 1 for i, r in enumerate(runs[n]) if r is not None), default=0)

    # The seconds each round said were still expected (confirm.py's forecast, recorded).
    more = {int(f["round"]): float(f["more_s"]) for f in conf.get("forecast") or []}
    out = {}
    for k in range(1, int(conf.get("rounds") or 0) + 1):
        shown = [n for n in runs if n != base and not (n in dropped and last(n) < k)]
        cands = [Candidate(n, interval_of(runs[n][:k], runs[base][:k], [
            a or b for a, b in zip(busy.get(n, [])[:k], busy.get(base, [])[:k], strict=False)]),
            0, 0.0) for n in shown]
        gone = sorted(n for n in shown if n in dropped and last(n) == k)
        settled = [c for c in cands if c.number not in gone]
        out[("round", k)] = round_line(k, settled, k * float(conf.get("expected_round_s") or 1),
                                       base, gone, more.get(k))
    return out


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
    assert shape("[1/12 00:13, ~02:00 left] trial 0 baseline: 128.7 samples/s, the best so far") \
        == shape("[3/12 10:02, ~01:00 left] trial 2 baseline: 5,969.7 samples/s, the best so far")
    assert shape("  samples/s  142.79") != shape("  samples/sec  142.79")
    lines = excerpts.tag(["autotune: study 'x' on cpu", "  workload: w",
                          "trial 0: the machine stayed busy",
                          "[1/2 00:01, ~00:01 left] trial 0 baseline: 2.9 samples/s",
                          "expected wall time ~00:10 (search ~00:05)",
                          "confirming trials 1 against yours (trial 0) in interleaved rounds",
                          "  round 1 (5s): trial 1 1.10x", "", "study 'x': 1 trials",
                          "  report: r"])
    assert [(ln.kind, ln.key) for ln in lines] == [
        ("header", 0), ("header", 1), ("other", 0), ("progress", 0), ("estimate", 0),
        ("confirming", 0), ("round", 1), ("other", 0), ("summary", 0), ("summary", 1)]
    assert excerpts.excerpt([lines[0], lines[1], lines[4]]) == [
        "autotune: study 'x' on cpu", "  workload: w", "...",
        "expected wall time ~00:10 (search ~00:05)"]


def test_the_recorded_console_is_read_at_a_glance() -> None:
    """Issue 72's sizes for the README's study at the default verbosity: at most 6,000
    characters, no line over 120, a header of at most 5 lines, one line per trial and a summary
    of at most 12 lines (the report's and the could-not-measure statement's aside); the
    details are in the study's autotune.log, recorded beside it."""
    console, run = excerpts.read_record()
    size = excerpts.sizes(console)
    assert size["chars"] <= 6000 and size["longest"] <= 120, size
    tagged = excerpts.tag(console)
    assert len([ln for ln in tagged if ln.kind == "header"]) <= 5
    trials = [ln.key for ln in tagged if ln.kind == "progress"]
    assert len(trials) == len(set(trials)) == run["trials"]
    summary = [ln for ln in tagged if ln.kind == "summary" and "report: " not in ln.text]
    assert len(summary) <= 12
    log = (RECORD / "autotune.log").read_text()
    for detail in ("  fixed ", "  diagnosis: ", "expected wall time ~", "confirming: trials"):
        assert detail in log, detail
