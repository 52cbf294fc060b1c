"""Never nothing when something faster is safe: where the numerics check refuses every
finalist that changes the arithmetic, the study measures, confirms and exports the fastest
configuration that keeps it (the speed-only answer), and says what the refused ones would
have given and why, in best.yaml, the summary and the report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.results.export import best_document
from autotune.results.record import set_study_attrs
from autotune.results.report_html import write_report
from autotune.search.checks.numerics import check_numerics
from autotune.search.checks.speed_only import speed_only_knobs
from autotune.search.confirmation import confirm as confirm_mod
from autotune.search.console.summary import numerics_lines
from autotune.search.loop.speed_only import fall_back
from tests.test_numerics import _setup, _trial


def test_speed_only_knobs_set_the_arithmetic_back_and_keep_the_rest() -> None:
    base = {"batch_size": 16, "amp": "off", "compile": "off", "num_workers": 0,
            "channels_last": False}
    fast = {**base, "batch_size": 64, "amp": "bf16", "compile": "default", "num_workers": 2}
    assert speed_only_knobs(fast, base) == {**base, "batch_size": 64, "num_workers": 2}


def _serve(study: optuna.Study, figures: dict[int, float]) -> Any:
    """The planted trials' windows for the first confirmation (a figure per trial)."""
    from autotune.measure.protocol import WindowResult

    by_knobs = {json.dumps(t.user_attrs["knobs"], sort_keys=True): figures[t.number]
                for t in study.trials}

    def run(req: Any, trial_dir: Path, **_: Any) -> WindowResult:
        i = int(trial_dir.name.split("-")[0])
        figure = by_knobs[json.dumps(req.knobs, sort_keys=True)] * (1 + 0.01 * math.sin(3 * i))
        return WindowResult(outcome="ok", samples_per_sec=figure, steps=10, wall_s=1.0)
    return run


def test_every_numerics_finalist_refused_exports_the_speed_only_answer(tmp_path: Path) -> None:
    """A 4x batch with bf16 is the fastest finalist, and bf16 rounds this model's logits
    away: refused. Its speed knobs with the user's arithmetic (the 4x batch in fp32) are
    measured, confirmed and exported, and the words say what bf16 would have given."""
    setup = _setup(tmp_path, "tests.workloads_numerics.WrongCast", numerics_steps=10,
                   confirm_runs=1, confirm_budget_s=0, confirm_precision=10)
    base = setup.space.baseline
    assert base["batch_size"] == 16 and base["amp"] == "off"
    assert 64 in setup.space.domains["batch_size"].values
    fast = {**base, "batch_size": 64, "amp": "bf16"}
    study = optuna.create_study(direction="maximize")
    set_study_attrs(study, {"training": "any", "workload": "wrong-cast (planted)"})
    study.add_trial(_trial(0, base, 100.0, source="baseline"))
    study.add_trial(_trial(1, fast, 400.0))
    assert confirm_mod.confirm(setup, study, 1, 3, run=_serve(study, {0: 100.0, 1: 400.0}))
    check_numerics(setup, study)
    kept = best_document(study, "sqlite://")
    assert kept is not None and kept["best_trial"] == 0
    # Refused, and the reason for keeping yours is the real one, not "the only one measured".
    assert kept["numerics"]["trials"]["1"]["passed"] is False
    assert kept["speedup_text"].startswith("none: your own configuration (trial 0) is kept: "
                                           "trial(s) 1 measured faster and were refused by the "
                                           "numerics check"), kept["speedup_text"]

    done = fall_back(setup, study)
    assert done is not None and done["confirmed"] is True, done
    doc = best_document(study, "sqlite://")
    assert doc is not None
    speed_only = int(next(iter(done["from"])))
    assert doc["best_trial"] == speed_only and done["from"][str(speed_only)] == 1
    assert doc["knobs"]["batch_size"] == 64 and doc["knobs"]["amp"] == "off"
    assert not doc["speedup_text"].startswith("none"), doc["speedup_text"]
    assert speed_only in doc["confirmation"]["finalists"]
    assert 1 not in doc["confirmation"]["finalists"]  # refused: not confirmed again
    assert doc["numerics"]["trials"][str(speed_only)]["passed"] is True  # your arithmetic
    assert "0" not in doc["numerics"]["trials"]  # your own configuration: nothing to check
    words = doc["numerics"]["words"]
    assert words.startswith("refused by the numerics check, their loss beyond your own "
                            "seed-to-seed spread (figures below): trial 1, which would have "
                            "given 4.00x (one search window each); "), words
    assert (f"exported instead the speed-only answer, trial {speed_only}: trial 1's speed knobs "
            f"with your arithmetic (amp bf16 -> off), {doc['speedup_text']}") in words
    lines = numerics_lines(doc["numerics"])
    assert lines[0] == f"numerics: {words}"
    assert any(line.startswith("numerics trial 1: refused: its loss over the last 5 of 10 "
                               "steps lies ") for line in lines), lines
    assert fall_back(setup, study) is None  # once
    # The report says it too: the outcome in its headline, each trial's figures in a table.
    write_report(study, tmp_path, "sqlite://")
    report = (tmp_path / "report.md").read_text()
    assert f"- Numerics check: {words}" in report
    assert "## Numerics check (each checked trial's loss over the last 5 of its first 10 " \
           "steps against your configuration's at several seeds" in report
    assert "| 1 | amp | " in report and "would have given 4.00x" in report


@pytest.mark.parametrize("refused_faster", [True, False])
def test_the_report_states_the_check(tmp_path: Path, refused_faster: bool) -> None:
    """report.md carries the check's outcome and each checked trial's figures: the tolerance,
    the spread it came from, the deviation."""
    from autotune.results.report_numerics import numerics_rows

    entry = {"families": ["amp"], "passed": not refused_faster, "tolerance": 0.174,
             "family_tolerance": 0.1, "spread": 0.058, "deviation": 5.99 if refused_faster
             else 0.02, "deviations": [5.99, 3.71] if refused_faster else [0.02],
             "reference": {"center": 1.125, "seeds": [0, 1, 2], "tails": [1.1, 1.19, 1.08]},
             "reason": "refused: planted" if refused_faster else None,
             "would_give": "4.00x (one search window each)" if refused_faster else None}
    rows = numerics_rows({"steps": 10, "tail_steps": 5, "trials": {"1": entry}})
    assert rows[0][:5] == ["1", "amp", "1.125 (seeds 0, 1, 2)", "5.80%",
                           "17.40% (3x the spread, at least 10%)"]
    assert rows[0][5] == ("599.00%, 371.00%" if refused_faster else "2.00%")
    assert rows[0][6] == ("refused: planted; would have given 4.00x (one search window each)"
                          if refused_faster else "passed")


def test_speedup_none_names_its_real_reason() -> None:
    """Without a confirmation, your own configuration kept beside slower trials is not "the
    only one measured to the end"."""
    from autotune.results.answers import speedup_words

    study = optuna.create_study(direction="maximize")
    base = {"batch_size": 16, "amp": "off"}
    study.add_trial(_trial(0, base, 100.0, source="baseline"))
    assert speedup_words(study.trials[0], study.trials[0], {}, study) == (
        "none: your own configuration (trial 0) is the only one measured to the end")
    study.add_trial(_trial(1, {**base, "batch_size": 32}, 90.0))
    assert speedup_words(study.trials[0], study.trials[0], {}, study) == (
        "none: no configuration read faster than yours (trial 0) by more than its windows' "
        "noise")
