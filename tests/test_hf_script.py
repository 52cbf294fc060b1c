"""A Hugging Face ``HfArgumentParser`` + ``Trainer`` script, with no autotune line in it, tuned
as it is launched (``autotune -- python train.py --per_device_train_batch_size 8 ...``): the
baseline read from the Trainer's arguments, each trial's knobs in the arguments the Trainer was
built with (the global batch kept), its windows measured in the Trainer's own loop and ended
before the script's save, the exports an HfArgumentParser user applies, and ``autotune
apply`` running the unchanged script with them (adapters/hf/script.py,
measure/framework_hooks.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import (
    BARE_ARGS,
    ROOT,
    child_env,
    leftover_trials,
    measured_trials,
    ran_to_the_end,
    run_cli,
    tuned_as_two_ranks,
)

pytest.importorskip("transformers")

SCRIPT = ROOT / "examples" / "hf_run_clm.py"
COMMAND = ["python", "train.py", "--output_dir", "out", "--per_device_train_batch_size", "8",
           "--gradient_accumulation_steps", "2", "--max_steps", "400", "--use_cpu", "true",
           "--report_to", "none", "--learning_rate", "1e-3"]


@pytest.mark.slow  # a study of a real Trainer: each trial a process that builds it
def test_an_unchanged_trainer_script_is_tuned_applied_and_verified(tmp_path: Path) -> None:
    """Break it once: the hook not installed (every trial at the baseline's batch, or the
    study refused for want of meter steps), the arguments not tuned (a trial's Trainer at
    another batch than its request), the outputs not redirected (the user's out/ written):
    each fails here."""
    (tmp_path / "train.py").write_text(SCRIPT.read_text())
    since = time.time()
    proc = run_cli(["study.n_trials=3", "knobs.batch_size=[4,8,16]", "knobs.compile=off",
                    "knobs.attention=[sdpa,eager]", *BARE_ARGS, "--",
                    *COMMAND], tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    folder = tmp_path / "studies" / "train-cpu"
    base = json.loads((folder / "trials" / "0" / "request.json").read_text())
    assert base["knobs"]["batch_size"] == 8 and base["grad_accum"] == 2  # read from the args
    assert base["knobs"]["attention"] == "sdpa"  # read from the model GPT-2 was built with
    seen = set()
    for trial, request, result, logs in measured_trials(folder):
        built = re.search(r"TRAINER batch=(\d+) accum=(\d+) bf16=(\w+) out=(\S+)", logs)
        assert built, logs[-2000:]
        batch, accum = int(built.group(1)), int(built.group(2))
        # The trial's knobs in the Trainer it built, the global batch of 16 kept.
        assert batch == request["knobs"]["batch_size"], (trial, logs[-1500:])
        assert batch * accum == 16, (batch, accum)
        assert built.group(3) == str(request["knobs"]["amp"] == "bf16")
        assert str(trial) in built.group(4)  # its outputs in the trial's folder
        # The model's attention as the trial asked (no TrainingArguments field holds it).
        attn = re.search(r" attn=(\w+)", logs)
        assert attn and attn.group(1) == ("eager" if request["knobs"]["attention"] == "eager"
                                          else "sdpa"), (trial, request["knobs"]["attention"])
        assert result["samples_per_sec"] > 0 and result["step_ms"]["median"] > 0
        assert result["timers"]["data_wait"] is not None
        seen.add(batch)
    assert len(seen) >= 2, seen  # another batch than the script's was measured
    assert not (tmp_path / "out").exists(), "a trial wrote the user's output_dir"
    assert not leftover_trials(since, tmp_path)

    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["framework"] == "hf"
    assert best["workload"].endswith("(its Hugging Face Trainer, tuned through its arguments)")
    fields = yaml.safe_load((folder / "training_args.yaml").read_text())
    assert fields["per_device_train_batch_size"] == best["knobs"]["batch_size"]
    assert fields["gradient_accumulation_steps"] * fields["per_device_train_batch_size"] == 16
    flags = yaml.safe_load((folder / "training_args_flags.yaml").read_text())["flags"]
    assert f"--per_device_train_batch_size {best['knobs']['batch_size']}" in flags
    # What no field holds, for a script built otherwise: the model's attention implementation.
    model = yaml.safe_load((folder / "model_settings.yaml").read_text())
    assert model["attn_implementation"] == ("eager" if best["knobs"]["attention"] == "eager"
                                            else "sdpa"), model

    # The script unchanged in production, under the study's answer: its Trainer built with it.
    applied = subprocess.run(
        [sys.executable, "-c", "from autotune.cli.main import main; main()", "apply",
         str(folder), "--", *[a if a != "400" else "2" for a in COMMAND]],
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)
    assert applied.returncode == 0, (applied.stdout + applied.stderr)[-3000:]
    assert (f"TRAINER batch={best['knobs']['batch_size']} "
            f"accum={fields['gradient_accumulation_steps']}") in applied.stdout
    assert f"attn={model['attn_implementation']}" in applied.stdout  # set on the model too
    assert (tmp_path / "out").exists()  # a full run saves where the user said
    # An answer that switches the model's attention (the trials' path, set on the model as
    # the Trainer is built): the script's GPT-2 is built with sdpa, and runs eager.
    best["knobs"]["attention"] = "eager"
    (folder / "best.yaml").write_text(yaml.safe_dump(best))
    eager = subprocess.run(
        [sys.executable, "-c", "from autotune.cli.main import main; main()", "apply",
         str(folder), "--", *[a if a != "400" else "2" for a in COMMAND]],
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)
    assert eager.returncode == 0 and " attn=eager" in eager.stdout, eager.stdout[-2000:]


@pytest.mark.slow  # 2 ranks of a real Trainer per trial
def test_a_trainer_script_launched_as_two_ranks_is_tuned_under_the_launcher(
        tmp_path: Path) -> None:
    """launch.nproc_per_node=2: each trial runs the unchanged script as 2 ranks under torch's
    launcher (gloo here), the Trainer's own DDP across them (it reads the world from the
    launcher's environment, as under torchrun); each rank's window is measured in the
    Trainer's loop, the trial's figure is both ranks', and neither runs on to save_model."""
    (tmp_path / "train.py").write_text(SCRIPT.read_text())
    tuned_as_two_ranks(tmp_path, COMMAND, "[4,8]", r"TRAINER batch=\d+")
    assert not (tmp_path / "out").exists(), "a rank ran the script on to save_model"
