"""autotune from Python: ``autotune.tune`` runs the command line's study and returns its
BestConfig; a Workload object defined in the caller's own ``__main__`` (a notebook) travels to
the trials; a usage error is a ConfigError before anything runs; an object that cannot travel
is named; Ctrl-C stops the study with StudyInterrupted and the same call resumes it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.core.shipping import CannotTravel
from tests.conftest import BARE_ARGS, TINY_ARGS, child_env

#: What a notebook cell would run: a Workload class of its own (in __main__), then tune.
NOTEBOOK = textwrap.dedent('''
    import sys, torch, autotune
    from autotune.workloads.mlp import MLPWorkload

    class Mine(MLPWorkload):
        """Defined here, in __main__: it reaches the trials by value."""
        name = "mine"

        def loss(self, outputs, targets):
            return torch.nn.functional.cross_entropy(outputs, targets) * 1.0

    overrides = {args!r}
    try:
        best = autotune.tune(overrides, workload={workload}, device="cpu", n_trials={n},
                             name="{name}")
    except autotune.StudyInterrupted as exc:
        print("INTERRUPTED", exc.code, flush=True)
        sys.exit(0)
    except autotune.CouldNotMeasure as exc:  # a busy machine: the export stands (guide/python.md)
        best = exc.best
    print("BEST", best.document["best_trial"], best.knobs["batch_size"],
          best.metrics["samples_per_sec"] > 0, flush=True)
''')


def _python(tmp_path: Path, code: str) -> subprocess.Popen[str]:
    script = tmp_path / "cell.py"
    script.write_text(code)
    env = child_env(AUTOTUNE_PROGRESS="lines")
    return subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_tune_runs_the_study_from_python_with_a_workload_of_the_callers_own(tmp_path: Path
                                                                           ) -> None:
    proc = _python(tmp_path, NOTEBOOK.format(args=TINY_ARGS, workload="Mine(n_samples=512)",
                                             n=3, name="nb"))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("BEST"))
    assert line.endswith("True"), line
    assert "[3/3" in out  # the progress lines show in the caller's output
    # the script has no `if __name__ == "__main__"` guard: no process autotune starts may run
    # it again (the fork server's first child did, and died starting a study of its own)
    assert "bootstrapping phase" not in out, out[-3000:]
    study = optuna.load_study(study_name="nb", storage=f"sqlite:///{tmp_path}/studies/nb/study.db")
    assert len(study.trials) == 3
    assert "shipping" in study.user_attrs["workload_target"]  # by value, not by import path
    assert (tmp_path / "studies" / "nb" / "best.yaml").exists()
    assert (tmp_path / "studies" / "nb" / "report.html").exists()


def test_an_interrupted_study_resumes_with_the_same_call(tmp_path: Path) -> None:
    args = [*BARE_ARGS, "window.measure_steps=30", "window.measure_seconds=60"]
    cell = NOTEBOOK.format(
        args=args, n=2, name="intr",
        workload='{"_target_": "tests.workloads_faulty.SlowStep", "sleep_ms": 300}')
    proc = _python(tmp_path, cell)
    beat = tmp_path / "studies" / "intr" / "trials" / "0" / "progress.json"
    deadline = time.time() + 180
    while not beat.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # a notebook's interrupt: SIGINT to the kernel
    out, _ = proc.communicate(timeout=120)
    assert "INTERRUPTED 130" in out, out[-3000:]
    storage = f"sqlite:///{tmp_path}/studies/intr/study.db"
    first = optuna.load_study(study_name="intr", storage=storage).trials[0]
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["outcome"] == "interrupted"

    fast = NOTEBOOK.format(args=BARE_ARGS, n=2, name="intr",
                           workload='{"_target_": "tests.workloads_faulty.SlowStep", "sleep_ms": 300}')
    again = _python(tmp_path, fast)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0 and "BEST" in out, out[-3000:]
    trials = optuna.load_study(study_name="intr", storage=storage).trials
    assert trials[0].state == optuna.trial.TrialState.FAIL and len(trials) == 3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials[1:])


def test_a_usage_error_is_a_config_error_naming_what_is_valid(tmp_path: Path) -> None:
    with pytest.raises(autotune.ConfigError, match="Valid workloads"):
        autotune.tune(["workload=resnet50"], out_dir=tmp_path)
    with pytest.raises(autotune.ConfigError, match="no such knob. Valid knobs: num_workers"):
        autotune.tune(workload="mlp", knobs={"workers": 2}, out_dir=tmp_path)
    with pytest.raises(ValueError, match="needs a _target_"):
        autotune.tune(workload={"hidden": 3}, out_dir=tmp_path)
    assert not (tmp_path / "mlp-cpu").exists()  # nothing was run or written


class _Holder(autotune.Workload):
    """A workload holding an open file: it cannot be pickled for the trials."""

    name = "holder"

    def __init__(self, path: Path):
        self.log = path.open("w")


def test_an_object_that_cannot_travel_is_named(tmp_path: Path) -> None:
    with pytest.raises(CannotTravel) as err:
        autotune.tune(workload=_Holder(tmp_path / "x.log"), device="cpu", out_dir=tmp_path)
    text = str(err.value)
    assert "the workload" in text and "_Holder" in text and "cannot be sent" in text
    assert "Cannot pickle files" in text and "lazily" in text


def test_tune_from_a_thread_runs_without_signal_handlers(tmp_path: Path) -> None:
    """A notebook may run work in a thread; the study must not fail on signal.signal."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["best"] = autotune.tune(["workload=mlp", *TINY_ARGS], device="cpu", n_trials=1,
                                        name="thread", out_dir=tmp_path / "studies")
        except BaseException as exc:  # noqa: BLE001 - reported below
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=600)
    assert "error" not in box, box.get("error")
    assert isinstance(box["best"], autotune.BestConfig)
