"""The training a user already launches, tuned as it is: ``autotune [overrides] -- python
train.py ARGS`` (workloads/script.py, measure/script_trial.py, production/settings.py).

The scripts here are real files run by the real command line: the study's baseline is read
from the script's own calls, each trial is the script in a process of its own that ends once
its window is measured (its checkpoint at the end never written), and each fault is said in one
paragraph."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import autotune
from autotune.core.workload import WorkloadError
from autotune.workloads.script import ScriptWorkload
from tests.conftest import BARE_ARGS, leftover_trials, ran_to_the_end, run_cli

#: A plain script, as the own-loop guide writes one: its settings given once, to its rt calls;
#: it saves a checkpoint at its end, which no trial and no verify side may reach.
SCRIPT = '''
import argparse, sys
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import autotune

p = argparse.ArgumentParser()
p.add_argument("-b", type=int, default=32)
p.add_argument("-j", type=int, default=0)
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--out", default="saved")
a = p.parse_args()
torch.manual_seed(0)
rt = autotune.Runtime()
x = torch.randn(2048, 32); y = (x @ torch.randn(32, 4)).argmax(1)
loader = DataLoader(TensorDataset(x, y), shuffle=True, drop_last=True,
                    **rt.loader_kwargs(batch_size=a.b, num_workers=a.j))
model = rt.model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, **rt.optimizer_kwargs())
meter = rt.meter()
step = 0
while step < a.steps:
    for inputs, targets in meter.wrap(loader):
        inputs, targets = rt.to_device(inputs, targets)
        with rt.autocast():
            loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward(); opt.step(); rt.zero_grad(opt)
        meter.step(len(targets), loss=loss)
        step += 1
        if step >= a.steps:
            break
Path(a.out).mkdir()  # the end of the run: evaluation, checkpoint, upload
(Path(a.out) / "done").write_text(str(step))
'''


def _script(tmp_path: Path, text: str = SCRIPT, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# --- the script's own settings, before any study -----------------------------------------------
def test_without_a_best_yaml_the_calls_return_the_scripts_own_settings() -> None:
    """No study yet: the script trains as written, its settings given once in its own lines."""
    rt = autotune.Runtime(device="cpu")
    assert rt.source.mode == "own"
    kwargs = rt.loader_kwargs(batch_size=24, num_workers=0)
    assert kwargs["batch_size"] == 24 and kwargs["num_workers"] == 0
    assert rt.batch_size == 24
    assert rt.optimizer_kwargs() == {}
    with rt.autocast():
        assert not torch.is_autocast_enabled("cpu")
    with rt.autocast(dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
    assert rt.source.own["batch_size"] == 24 and "amp" in rt.source.reached


def test_with_a_best_yaml_the_measured_values_replace_the_scripts_own(cpu_env: object) -> None:
    from autotune.core.space import build_space
    from autotune.workloads.mlp import MLPWorkload

    knobs = {**build_space(cpu_env, MLPWorkload(), {}).baseline,  # type: ignore[arg-type]
             "batch_size": 64, "num_workers": 1}
    rt = autotune.Runtime({"schema": 1, "knobs": knobs}, device="cpu")
    kwargs = rt.loader_kwargs(batch_size=24, num_workers=0)
    assert kwargs["batch_size"] == 64 and kwargs["num_workers"] == 1


def test_a_best_yaml_the_study_has_not_written_yet_runs_the_scripts_own_settings(
        tmp_path: Path) -> None:
    """A script that names the file its study will write (nanoGPT's train.py) runs before
    the study with its own values, and rt.setting gives a line of its own the value."""
    rt = autotune.Runtime(str(tmp_path / "studies" / "x" / "best.yaml"), device="cpu")
    assert rt.source.mode == "own"
    assert rt.setting("batch_size", 12) == 12 and rt.batch_size == 12
    with pytest.raises(ValueError, match="not a knob"):
        rt.setting("batchsize", 12)


def test_a_trial_window_in_the_process_wins_over_the_best_yaml_the_script_names(
        tmp_path: Path, cpu_env: object) -> None:
    from autotune.core.config import WindowConfig
    from autotune.core.space import build_space
    from autotune.measure import script_window
    from autotune.measure.protocol import TrialRequest
    from autotune.workloads.mlp import MLPWorkload

    knobs = build_space(cpu_env, MLPWorkload(), {}).baseline  # type: ignore[arg-type]
    best = tmp_path / "best.yaml"
    best.write_text(json.dumps({"schema": 1, "knobs": {**knobs, "batch_size": 8}}))
    req = TrialRequest(workload={}, knobs={**knobs, "batch_size": 48}, device="cpu",
                       window=WindowConfig())
    script_window.start(req, tmp_path / "result.json")
    try:
        rt = autotune.Runtime(str(best), device="cpu")
        assert rt.source.mode == "trial" and rt.setting("batch_size", 12) == 48
    finally:
        script_window._current = None
    assert autotune.Runtime(str(best), device="cpu").batch_size == 8


def test_the_own_settings_need_a_batch_size_and_name_what_is_valid() -> None:
    rt = autotune.Runtime(device="cpu")
    with pytest.raises(ValueError, match="give yours"):
        rt.loader_kwargs()
    with pytest.raises(TypeError, match="batch_size, num_workers"):
        rt.loader_kwargs(batch_size=8, shuffle=True)


def test_a_wrapped_loader_keeps_its_length() -> None:
    """A recipe's progress logger (torchvision's MetricLogger.log_every) reads len()."""
    loader = DataLoader(TensorDataset(torch.zeros(40, 2)), batch_size=8)
    meter = autotune.Meter(None)
    wrapped = meter.wrap(loader)
    assert len(wrapped) == 5
    assert sum(1 for _ in wrapped) == 5


# --- the discovery run -------------------------------------------------------------------------
def test_the_baseline_is_read_from_the_scripts_own_calls(tmp_path: Path) -> None:
    """The study's baseline is the script's configuration as launched (-b 24 -j 1), and the
    knobs no call reaches stay at the script's value with the line that would reach them."""
    _script(tmp_path)
    wl = ScriptWorkload(["python", "train.py", "-b", "24", "-j", "1"], cwd=str(tmp_path))
    assert wl.name == "train"
    assert wl.defaults["batch_size"] == 24 and wl.defaults["num_workers"] == 1
    assert wl.defaults["amp"] == "off" and wl.optimizer_name == "SGD"
    assert "batch_size" not in wl.knob_limits and "amp" not in wl.knob_limits
    assert "compile" in wl.knob_limits  # the script never calls rt.compile
    assert "rt.compile(model)" in wl.knob_limits["compile"][1]
    assert not (tmp_path / "saved").exists()


@pytest.mark.parametrize("body, words", [
    ("raise SystemExit('no data under /data/imagenet')\n", "failed before its second step"),
    ("import torch\nx = torch.zeros(3)\nprint(x[5])\n", "IndexError"),
    ("input('continue? ')\n", "EOFError"),
    ("print('training without autotune')\n", "without reporting two steps"),
])
def test_a_script_that_cannot_be_read_says_why_in_one_paragraph(tmp_path: Path, body: str,
                                                                 words: str) -> None:
    _script(tmp_path, body)
    with pytest.raises(WorkloadError, match=words):
        ScriptWorkload(["python", "train.py"], cwd=str(tmp_path))


@pytest.mark.parametrize("command, words", [
    (["bash", "train.sh"], "runs a Python training command"),
    (["python", "missing.py"], "is not a file here"),
    ([], "no command after"),
])
def test_a_command_that_is_not_a_python_script_is_refused(tmp_path: Path, command: list[str],
                                                            words: str) -> None:
    with pytest.raises(WorkloadError, match=words):
        ScriptWorkload(command, cwd=str(tmp_path))


# --- the study -----------------------------------------------------------------------------------
def test_the_launched_script_is_tuned_as_it_is_and_resumed_and_verified(tmp_path: Path) -> None:
    """One command: the study's trials are the script, each ending at its window's end (the
    checkpoint the script writes at its end is never written), no process left behind; the
    same command again resumes; verify runs the same command, each side ending at its
    window."""
    _script(tmp_path)
    since = time.time()
    args = ["study.n_trials=2", *BARE_ARGS, "--", "python", "train.py", "-b", "24"]
    proc = run_cli(args, tmp_path)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    assert "workload: your command: python train.py -b 24" in out
    folder = tmp_path / "studies" / "train-cpu"
    request = json.loads((folder / "trials" / "0" / "request.json").read_text())
    assert request["knobs"]["batch_size"] == 24 and request["knobs"]["num_workers"] == 0
    result = json.loads((folder / "trials" / "0" / "result.json").read_text())
    assert result["outcome"] == "ok" and result["samples_per_sec"] > 0
    assert result["timers"]["data_wait"] is not None and result["step_ms"]["median"] > 0
    assert (folder / "best.yaml").exists()
    assert not (tmp_path / "saved").exists(), "a trial ran the script past its window"
    assert not leftover_trials(since, tmp_path)

    study = optuna.load_study(study_name="train-cpu", storage=f"sqlite:///{folder}/study.db")
    trials = [(t.number, t.params) for t in study.get_trials()]
    again = run_cli(args, tmp_path)  # the same command: the same study, its trials kept
    assert ran_to_the_end(again.returncode, again.stdout + again.stderr)
    resumed = optuna.load_study(study_name="train-cpu", storage=f"sqlite:///{folder}/study.db")
    after = [(t.number, t.params) for t in resumed.get_trials()]
    assert after[:len(trials)] == trials and len(after) > len(trials)  # n_trials more

    ver = run_cli(["verify", str(folder), "--rounds", "1", "--steps", "8", "--warmup", "2"],
                  tmp_path)
    assert ver.returncode == 0, (ver.stdout + ver.stderr)[-3000:]
    doc = json.loads((folder / "verify.json").read_text())
    assert doc["how"].startswith("train.py, your script")
    assert all(f["steps"] == 10 for side in doc["figures"].values() for f in side)
    assert not (tmp_path / "saved").exists(), "a verify side ran the script past its window"


def test_a_script_shorter_than_a_window_says_how_many_steps_it_ran(tmp_path: Path) -> None:
    _script(tmp_path)
    proc = run_cli(["study.n_trials=2", *BARE_ARGS, "--", "python", "train.py",
                    "--steps", "4"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "the script returned after 4 steps, before its window was measured" in out, out[-3000:]
    assert "epochs are shorter than a window" in out


def test_a_script_that_raises_in_a_trial_names_its_line_and_the_study_goes_on(
        tmp_path: Path) -> None:
    """A trial's knobs the script cannot run with (here: another batch size) fail that trial
    with the exception and the user's line; the baseline and the study go on."""
    _script(tmp_path, SCRIPT.replace(
        "meter = rt.meter()",
        "meter = rt.meter()\nif loader.batch_size != 32: raise RuntimeError('batch breaks')"))
    proc = run_cli(["study.n_trials=2", "knobs.batch_size=[32,64]", "knobs.num_workers=0",
                    *BARE_ARGS, "--", "python", "train.py"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "RuntimeError: batch breaks (raised before its first step, at train.py:" in out


def test_printing_stays_in_the_trials_log(tmp_path: Path) -> None:
    _script(tmp_path, SCRIPT.replace("step += 1", "step += 1; print('LOUD ' * 50)"))
    proc = run_cli(["study.n_trials=1", *BARE_ARGS, "--", "python", "train.py"], tmp_path)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    assert "LOUD" not in out
    logs = "".join(p.read_text() for p in (tmp_path / "studies" / "train-cpu" / "trials" / "0"
                                           ).glob("*.log"))
    assert "LOUD" in logs


def test_the_command_line_refuses_a_command_that_is_not_python(tmp_path: Path) -> None:
    proc = run_cli(["--", "bash", "train.sh"], tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "runs a Python training command" in proc.stdout + proc.stderr


def test_a_script_that_hangs_in_its_window_is_ended_as_stalled(tmp_path: Path) -> None:
    """Past the discovery run's two steps the script stops stepping (a read that never
    returns): the trial's watchdog ends it as stalled, with its loader workers."""
    _script(tmp_path, SCRIPT.replace("step += 1", "step += 1\n        if step == 4: time.sleep(3600)")
            .replace("import argparse, sys", "import argparse, sys, time"))
    since = time.time()
    proc = run_cli(["study.n_trials=1", *BARE_ARGS, "window.stall_s=5", "--", "python",
                    "train.py"], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "stalled" in out.lower(), out[-3000:]
    assert not leftover_trials(since, tmp_path)


#: A DDP script, as torchrun launches it: its own process group, rt.ddp for the model.
DDP_SCRIPT = '''
import torch, torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import autotune

rt = autotune.Runtime()
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
x = torch.randn(1024, 32); y = (x @ torch.ones(32, 4)).argmax(1)
loader = DataLoader(TensorDataset(x, y), shuffle=True, drop_last=True,
                    **rt.loader_kwargs(batch_size=16, num_workers=0))
model = rt.ddp(rt.model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
meter = rt.meter()
for epoch in range(1000):
    for inputs, targets in meter.wrap(loader):
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward(); opt.step(); rt.zero_grad(opt)
        meter.step(len(targets), loss=loss)
open("finished", "w").write("the end of the run")
'''


def test_a_script_launched_as_two_ranks_is_tuned_under_the_launcher(tmp_path: Path) -> None:
    """launch.nproc_per_node=2: each trial runs the command as 2 ranks under torch's launcher
    (gloo here), each rank's window ending at the same step (one decision at each chunk
    edge), the trial's figure every rank's samples; none runs past its window."""
    _script(tmp_path, DDP_SCRIPT)
    since = time.time()
    proc = run_cli(["study.n_trials=2", "launch.nproc_per_node=2", *BARE_ARGS, "--", "python",
                    "train.py"], tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    folder = tmp_path / "studies" / "train-cpu-2ranks"
    result = json.loads((folder / "trials" / "0" / "result.json").read_text())
    assert result["outcome"] == "ok", result
    assert sorted(r["rank"] for r in result["ranks"]) == [0, 1]
    assert not (tmp_path / "finished").exists(), "a rank ran the script past its window"
    assert not leftover_trials(since, tmp_path)


def test_a_script_trial_is_profiled_after_its_window_for_the_diagnosis(tmp_path: Path) -> None:
    """The window's profiler capture, over the script's own steps after its window: a Chrome
    trace in the trial's folder and its summary, which the diagnosis reads."""
    _script(tmp_path)
    proc = run_cli(["study.n_trials=1", *BARE_ARGS, "window.profile=true", "--", "python",
                    "train.py"], tmp_path)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    trial = tmp_path / "studies" / "train-cpu" / "trials" / "0"
    result = json.loads((trial / "result.json").read_text())
    assert result["outcome"] == "ok" and "error" not in result["trace"], result["trace"]
    assert result["trace"]["steps"] >= 1 and Path(result["trace"]["trace_path"]).exists()
    assert "diagnosis:" in out
    assert not (tmp_path / "saved").exists()
