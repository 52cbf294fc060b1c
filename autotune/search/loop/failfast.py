"""A user's own configuration that does not train: stop after the baseline and say why.

Trial 0 runs exactly the workload's own settings. If it crashes, the fault is in the workload
(a batch layout the model does not take, a bug in ``loss``), not in a knob, and every other
trial would crash the same way. So the driver stops after it and names the error and the last
frame of the user's code in the trial's traceback, instead of spending the study on it.

A study resumed after the fix runs the baseline again: the crashed one is listed in the
study's ``superseded`` attribute (a finished trial cannot be changed) so that its failure is
not copied onto the new attempt.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.results.record import set_study_attrs, study_attrs, trial_attrs

#: The study's exit code when it exports nothing (the baseline crashed, or no trial finished
#: within the memory limit); usage errors are 2.
NOTHING_EXPORTED = 1

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_PACKAGE = str(Path(__file__).resolve().parents[1]) + "/"  # the whole autotune package
_LIBRARY = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                  sysconfig.get_paths()["platlib"], sys.prefix + "/lib"})


class BaselineCrashed(RuntimeError):
    """The baseline trial crashed: the message is the paragraph for the user."""


def baseline_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if trial_attrs(t).get("source") == "baseline"]


def crashed_baseline(study: optuna.Study) -> FrozenTrial | None:
    """The latest baseline trial, if it crashed and was not superseded by a later attempt."""
    runs = baseline_trials(study)
    last = max(runs, key=lambda t: t.number) if runs else None
    if last is None or last.state != TrialState.FAIL or last.number in superseded(study):
        return None
    return last if trial_attrs(last).get("outcome") == "crash" else None


def superseded(study: optuna.Study) -> set[int]:
    """Numbers of crashed baselines a later attempt replaced: never reused as twins."""
    return set(study_attrs(study).get("superseded", []))


def supersede(study: optuna.Study, trial: FrozenTrial) -> None:
    """Mark a crashed baseline as superseded: a new attempt measures, not copies, it."""
    set_study_attrs(study, {"superseded": sorted(superseded(study) | {trial.number})})


def user_frame(stderr_tail: str) -> str | None:
    """``file:line in function`` of the last traceback frame in the user's code: not in
    autotune, torch, the standard library or any installed package; the last frame of all if
    every one is library code. None without a traceback."""
    frames = []
    for line in stderr_tail.splitlines():
        m = _FRAME.match(line)
        if m:
            frames.append((m.group(1), m.group(2), m.group(3)))
    if not frames:
        return None
    mine = [f for f in frames if not f[0].startswith(_PACKAGE) and not f[0].startswith(_LIBRARY)
            and "site-packages" not in f[0] and not f[0].startswith("<")]
    path, line, func = (mine or frames)[-1]
    return f"{path}:{line} in {func}"


def paragraph(trial: FrozenTrial, out_dir: Path) -> str:
    """One paragraph: what failed, where, and what to do."""
    attrs = trial_attrs(trial)
    error = str(attrs.get("reason") or attrs.get("outcome")).removeprefix("crash: ")
    where = user_frame(str(attrs.get("stderr_tail") or ""))
    at = f" at {where}" if where else ""
    return (
        f"the baseline (trial {trial.number}: your workload with its own settings) crashed "
        f"with {error}{at}. Every trial would fail the same way, so the study stopped after "
        f"it. Fix the workload and run the same command again: the baseline is retried. The "
        f"trial's full stderr is in {out_dir / 'trials' / str(trial.number) / 'stderr.log'}."
    )
