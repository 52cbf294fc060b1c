"""A Lightning script with argparse, with no autotune line in it, tuned as it is launched
(``autotune -- python train.py --batch-size 32``): the baseline read from its Trainer and its
train loader, each trial's precision in the Trainer and its batch size in the loader fit
trained on (the global batch kept through ``accumulate_grad_batches``), the windows measured in
Lightning's own loop and ended before the script's checkpoint, lightning.yaml beside best.yaml,
and ``autotune apply`` running the unchanged script with the answer
(adapters/lightning/script.py, measure/framework_hooks.py)."""

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

pytest.importorskip("lightning")

SCRIPT = ROOT / "examples" / "lightning_train.py"


@pytest.mark.slow  # a study of a real Lightning Trainer: each trial a process that builds it
def test_an_unchanged_lightning_script_is_tuned_applied_and_exported(tmp_path: Path) -> None:
    """Break it once: the hook not installed (the study refused for want of meter steps), the
    loader not rebuilt (a trial's batches at the script's 32), the Trainer's arguments not
    tuned, the outputs not redirected (the user's lout/ written): each fails here."""
    (tmp_path / "train.py").write_text(SCRIPT.read_text())
    since = time.time()
    proc = run_cli(["study.n_trials=3", "knobs.batch_size=[16,32,64]", "knobs.compile=off",
                    *BARE_ARGS, "--",
                    "python", "train.py", "--batch-size", "32"], tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    folder = tmp_path / "studies" / "train-cpu"
    base = json.loads((folder / "trials" / "0" / "request.json").read_text())
    assert base["knobs"]["batch_size"] == 32 and base["grad_accum"] == 2  # read as built
    seen = set()
    for trial, request, result, logs in measured_trials(folder):
        built = re.search(r"BATCH (\d+) precision=(\S+) accum=(\d+) root=(\S+)", logs)
        assert built, logs[-2000:]
        batch, accum = int(built.group(1)), int(built.group(3))
        assert batch == request["knobs"]["batch_size"], (trial, logs[-1500:])
        assert batch * accum == 64, (batch, accum)  # the global batch of 32 x 2 kept
        assert built.group(2) == {"off": "32-true", "bf16": "bf16-mixed",
                                  "fp16": "16-mixed"}[request["knobs"]["amp"]]
        assert str(trial) in built.group(4)
        assert result["samples_per_sec"] > 0 and result["timers"]["data_wait"] is not None
        seen.add(batch)
    assert len(seen) >= 2, seen
    assert not (tmp_path / "lout").exists(), "a trial or the discovery wrote the user's folder"
    assert not leftover_trials(since, tmp_path)

    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["framework"] == "lightning"
    assert best["workload"].endswith("(its Lightning Trainer, tuned through its arguments)")
    doc = yaml.safe_load((folder / "lightning.yaml").read_text())
    assert doc["dataloader"]["batch_size"] == best["knobs"]["batch_size"]
    assert doc["trainer"]["accumulate_grad_batches"] * best["knobs"]["batch_size"] == 64

    applied = subprocess.run(
        [sys.executable, "-c", "from autotune.cli.main import main; main()", "apply",
         str(folder), "--", "python", "train.py", "--batch-size", "32", "--max-steps", "2"],
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)
    assert applied.returncode == 0, (applied.stdout + applied.stderr)[-3000:]
    assert f"BATCH {best['knobs']['batch_size']} " in applied.stdout, applied.stdout[-2000:]
    assert (tmp_path / "lout" / "final.ckpt").exists()  # a full run is the user's own


@pytest.mark.slow  # 2 ranks of a real Lightning Trainer per trial
def test_a_lightning_script_launched_as_two_ranks_is_tuned_under_the_launcher(
        tmp_path: Path) -> None:
    """launch.nproc_per_node=2: each trial runs the unchanged script as 2 ranks under torch's
    launcher (gloo here), Lightning's own DDP across them (its Trainer takes the world from the
    launcher's environment, as under torchrun); each rank's window is measured in Lightning's
    loop, the trial's figure is both ranks', and neither runs on to the script's checkpoint."""
    script = SCRIPT.read_text().replace(
        "devices=1,", 'devices=int(os.environ.get("WORLD_SIZE", "1")), strategy="ddp",')
    (tmp_path / "train.py").write_text(script.replace("import argparse\n", "import argparse\nimport os\n"))
    assert 'strategy="ddp"' in script
    tuned_as_two_ranks(tmp_path, ["python", "train.py", "--batch-size", "32"], "[16,32]",
                       r"BATCH \d+")
    assert not (tmp_path / "lout").exists(), "a rank ran the script on to its checkpoint"


#: The example with its loader built in the module's own train_dataloader, fit given none.
OWN_LOADER = {
    "    def configure_optimizers(self):": """    def train_dataloader(self):
        torch.manual_seed(0)
        x = torch.randn(8192, 32)
        y = (x @ torch.randn(32, 4)).argmax(1)
        return DataLoader(TensorDataset(x, y), batch_size=self.batch_size, shuffle=True,
                          drop_last=True)

    def configure_optimizers(self):""",
    "    def __init__(self):\n        super().__init__()":
        "    def __init__(self, batch_size=32):\n        super().__init__()\n"
        "        self.batch_size = batch_size",
    "trainer.fit(Net(), loader)": "trainer.fit(Net(a.batch_size))",
}


@pytest.mark.slow  # a study of a real Lightning Trainer: each trial a process that builds it
def test_a_loader_built_in_the_modules_own_train_dataloader_takes_each_trials_batch(
        tmp_path: Path) -> None:
    """A LightningModule that builds its loader in ``train_dataloader`` (fit given none): the
    baseline's batch is read from it, and each trial's loader is rebuilt with the trial's
    arguments, so the batch a trial measures is the one it asked for. Break it once: without
    the module's loader prepared every trial trains at the script's 32."""
    script = SCRIPT.read_text()
    for old, new in OWN_LOADER.items():
        assert old in script, old
        script = script.replace(old, new)
    (tmp_path / "train.py").write_text(script)
    proc = run_cli(["study.n_trials=3", "knobs.batch_size=[16,32,64]", "knobs.compile=off",
                    *BARE_ARGS, "--", "python", "train.py", "--batch-size", "32"], tmp_path,
                   timeout=600)
    out = proc.stdout + proc.stderr
    assert ran_to_the_end(proc.returncode, out), out[-3000:]
    folder = tmp_path / "studies" / "train-cpu"
    base = json.loads((folder / "trials" / "0" / "request.json").read_text())
    assert base["knobs"]["batch_size"] == 32, base["knobs"]  # read from the module's loader
    seen = set()
    for trial, request, _, logs in measured_trials(folder):
        built = re.search(r"BATCH (\d+) ", logs)
        assert built and int(built.group(1)) == request["knobs"]["batch_size"], (trial, logs[-1500:])
        seen.add(int(built.group(1)))
    assert len(seen) >= 2, seen
