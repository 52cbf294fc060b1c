"""The console at a glance (issue 72 item 1; core/console.py): at the default verbosity a
study prints a header of at most five lines, one line per trial, a short line per confirmation
round and a summary of at most a dozen lines, none over 120 characters; everything else is in
the study folder's autotune.log, and on the console with ``-v``."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from autotune.cli.main import verbose_flag
from autotune.core import console
from tests.conftest import run_cli


def test_v_is_taken_out_before_hydra_and_turns_the_details_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_VERBOSE", raising=False)
    assert verbose_flag(["workload=mlp"]) == ["workload=mlp"]
    assert not console.verbose()
    args = ["-v", "workload=mlp", "--", "python", "train.py", "-v"]
    assert verbose_flag(args) == ["workload=mlp", "--", "python", "train.py", "-v"]
    assert console.verbose() and os.environ["AUTOTUNE_VERBOSE"] == "1"


def _handler(stream: list[str]) -> logging.Handler:
    class ToList(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stream.append(self.format(record))
    return ToList()


@pytest.mark.parametrize("verbose", [False, True])
def test_study_log_shows_a_glance_keeps_every_detail_and_puts_the_handlers_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        verbose: bool) -> None:
    monkeypatch.setenv("AUTOTUNE_VERBOSE", "1" if verbose else "0")
    handler = logging.StreamHandler()  # a terminal's, as Hydra's console handler is
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    long = ("a warning that is a paragraph " * 8).rstrip()
    try:
        with console.study_log(tmp_path):
            console.say("trial 0 at a glance")
            console.detail("  diagnosis: the whole story")
            console.say(long)
    finally:
        root.removeHandler(handler)
    shown = capsys.readouterr().err.splitlines()
    assert "trial 0 at a glance" in shown
    assert ("  diagnosis: the whole story" in shown) is verbose
    if verbose:  # as the log file has it: one line, for grep
        assert long in shown
    else:
        assert max(len(line) for line in shown) <= console.WIDTH and len(shown) == 4
    kept = (tmp_path / console.LOG_FILE).read_text().splitlines()
    assert kept == ["trial 0 at a glance", "  diagnosis: the whole story", long]
    assert handler.level == logging.NOTSET and type(handler.formatter) is logging.Formatter
    assert not any(isinstance(h, logging.FileHandler) for h in console.log.handlers)


def test_fit_items_says_how_many_did_not_fit() -> None:
    assert console.fit_items(["a=1", "b=2", "c=3"], 100) == "a=1 b=2 c=3"
    assert console.fit_items(["a=1", "b=2", "c=3"], 12) == "a=1 +2 more"
    assert len(console.fit("x" * 300)) == console.WIDTH


def test_a_study_at_the_default_verbosity_is_read_at_a_glance(tmp_path: Path) -> None:
    out = run_cli(["workload=mlp", "device=cpu", "study.name=glance", "study.n_trials=4",
                   "window.measure_seconds=2", "study.confirm_budget_s=12", "study.prune=false"],
                  tmp_path,
                  env={"AUTOTUNE_VERBOSE": "0"})
    assert out.returncode in (0, 4), out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= console.WIDTH, out.stdout
    first_trial = next(i for i, line in enumerate(lines) if line.startswith("[1/4 "))
    assert lines[0].startswith("autotune: study 'glance'")
    header = 1 + next(i for i, line in enumerate(lines[1:]) if not line.startswith("  "))
    assert header <= 5 and header <= first_trial, out.stdout  # lines[:header]: the header
    for n in range(4):  # one line per trial, with its figure or its outcome
        assert sum(f"] trial {n} " in line for line in lines) == 1, out.stdout
    summary = lines[lines.index("") + 1:]
    assert summary[0].startswith("study 'glance': 4 trials")
    assert len([line for line in summary if "report: " not in line]) <= 12, out.stdout
    for detail in ("  diagnosis: ", "  fixed ", "trial 0 (baseline): "):
        assert detail not in out.stdout
    log = (tmp_path / "studies" / "glance" / console.LOG_FILE).read_text()
    details = ["  diagnosis: ", "  fixed ", "trial 0 (baseline): ", "expected wall time ~",
               "  samples/s "]
    if "no confirmation: " not in out.stdout:  # the search found no finalist beside yours
        details.append("confirming: trials")
    for detail in details:
        assert detail in log, detail
