"""CHILD side: a trial that is the user's own command (``autotune -- python train.py ARGS``).

The trial's process (forked from the fork server, torch already imported) runs the script as
``python`` would (``runpy``: ``__name__ == "__main__"``, its own ``sys.argv``, its folder first
on ``sys.path``, the command's working directory), with this trial's window made first
(measure/script_window.py): the script's ``autotune.Runtime`` reads the trial's knobs from
it, and its meter's steps are the window's. The window ends the process once it is measured;
what comes back here is a script that ended before that, or raised, and the result then says
which, in the user's terms.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

from autotune.core.files import atomic_write
from autotune.measure.framework_hooks import install_hooks
from autotune.measure.protocol import TrialRequest, WindowResult
from autotune.measure.script_window import ScriptWindow, WindowEnded, start
from autotune.measure.window import is_oom

#: The workload of a script study (workloads/script.py): its spec's ``_target_``.
SCRIPT_TARGET = "autotune.workloads.script.ScriptWorkload"


def is_script(req: TrialRequest) -> bool:
    return str(req.workload.get("_target_", "")) == SCRIPT_TARGET


def run(req: TrialRequest, result_path: Path, rank: bool = False) -> int:
    """Run the script under this trial's window; write a result where the window did not.
    ``rank``: one rank under the launcher, whose window ends by returning here."""
    window = start(req, result_path, unwind=rank)
    command = [str(a) for a in req.workload["command"]]
    cwd = req.workload.get("cwd")
    if cwd:
        os.chdir(cwd)
    install_hooks()  # a framework's Trainer, built by the script, takes the trial's knobs
    try:
        run_command(command)
        outcome, error = "crash", _ended_early(window, "returned")
    except WindowEnded:  # a rank's window is measured, its result written
        return 0
    except SystemExit as exc:
        outcome, error = "crash", _ended_early(window, f"exited with code {exc.code!r}")
    except KeyboardInterrupt:
        outcome, error = "interrupted", "the script was interrupted"
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded outcome
        traceback.print_exc()
        outcome = "oom" if is_oom(exc) else "crash"
        error = _raised(exc, window)
    result = window.result if window.steps else WindowResult()
    result.outcome, result.error = outcome, error
    atomic_write(result_path, result.to_json(), durable=False)
    return 0


def run_command(command: list[str]) -> None:
    """``python script.py ARGS`` or ``python -m module ARGS``, in this interpreter."""
    args = command[1:]
    if args[:1] == ["-m"]:
        sys.argv = [args[1], *args[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    script = os.path.abspath(args[0])
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


def _ended_early(window: ScriptWindow, how: str) -> str:
    if not window.steps:
        return (f"the script {how} without reporting a step to autotune's meter: call "
                "meter = rt.meter() once and meter.step(batch_size) after each step of your "
                "loop (rt = autotune.Runtime())")
    return (f"the script {how} after {window.steps} steps, before its window was measured: a "
            f"trial needs {window.needed()}; give the command more steps (its --max_steps or "
            "epochs are shorter than a window)")


def _raised(exc: BaseException, window: ScriptWindow) -> str:
    """The exception and the line of the user's code it came from."""
    text = str(exc).strip().splitlines()
    head = f"{type(exc).__name__}: {text[0] if text else ''}"
    where = _user_frame(exc)
    when = (f"after {window.steps} steps" if window.steps
            else "before its first step")
    return f"{head} (raised {when}{', at ' + where if where else ''})"


def _user_frame(exc: BaseException) -> str:
    """'train.py:42 (main)': the innermost frame outside Python's and the packages' files."""
    frames: list[Any] = traceback.extract_tb(exc.__traceback__)
    skip = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python", "<frozen")
    mine = [f for f in frames if not any(s in f.filename for s in skip)
            and Path(f.filename).name not in ("runpy.py", "script_trial.py")]
    if not mine:
        return ""
    f = mine[-1]
    return f"{Path(f.filename).name}:{f.lineno} ({f.name})"
