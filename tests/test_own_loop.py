"""A training loop the user writes and keeps, with each measured knob applied by one runtime
call (autotune/production/own_loop.py), and the tutorial that shows it (examples/own_loop.py,
docs/guide/own-loop.md): run as the page shows it, then under ``autotune verify --script``."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

import autotune
from autotune.core.host import WorkerThreads
from autotune.core.space import build_space
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, child_env

SCRIPT = ROOT / "examples" / "own_loop.py"
PAGE = ROOT / "docs" / "guide" / "own-loop.md"


def _runtime(cpu_env: Any, **knobs: Any) -> autotune.Runtime:
    """A Runtime over a best.yaml document: the mlp's baseline knobs with ``knobs`` set."""
    baseline = build_space(cpu_env, MLPWorkload(), {}).baseline
    doc = {"schema": 1, "knobs": {**baseline, **knobs}, "device": {"type": "cpu"},
           "metrics": {"samples_per_sec": 100.0}}
    return autotune.Runtime(doc, device="cpu")


def test_each_call_returns_the_line_the_knob_becomes(cpu_env: Any) -> None:
    """autocast, the GradScaler, zero_grad, the copy and memory format, the workers' threads
    and compile: each knob value reaches the plain PyTorch object the loop uses."""
    rt = _runtime(cpu_env, amp="bf16", set_to_none=False, channels_last=True, num_workers=1,
                  prefetch_factor=2, persistent_workers=False, cpu_threads=2)
    with rt.autocast():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    assert not rt.grad_scaler().is_enabled()  # bf16 needs no scaling: a pass-through
    inputs, targets = rt.to_device(torch.randn(2, 3, 4, 4), torch.tensor([0, 1]))
    assert inputs.is_contiguous(memory_format=torch.channels_last) and targets.device.type == "cpu"
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    rt.zero_grad(opt)
    assert model.weight.grad is not None and not model.weight.grad.any()  # zeroed in place
    assert isinstance(rt.worker_init_fn(), WorkerThreads)
    assert rt.compile(model) is model  # compile=off: the model itself

    plain = _runtime(cpu_env, amp="off", set_to_none=True)
    with plain.autocast():
        assert not torch.is_autocast_enabled("cpu")
    model(torch.randn(2, 4)).sum().backward()
    plain.zero_grad(opt)
    assert model.weight.grad is None
    assert plain.compile(model) is model and _runtime(cpu_env, compile="default").compile(
        model) is not model


def test_a_loop_of_its_own_is_told_it_runs_without_a_cuda_graph(cpu_env: Any) -> None:
    rt = _runtime(cpu_env, cuda_graphs=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            with rt.autocast():
                pass
    said = [str(w.message) for w in seen if issubclass(w.category, autotune.KnobOverridden)]
    assert len(said) == 1 and "cuda_graphs" in said[0] and "rt.wrap" in said[0]


def _run(args: list[str], cwd: Path, timeout: float = 540) -> str:
    proc = subprocess.run(args, cwd=cwd, env=child_env(AUTOTUNE_PROGRESS="lines"),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_tutorial_runs_as_written_and_under_verify(tmp_path: Path) -> None:
    """The page shows the script itself; its study, its loop (evaluation and a checkpoint)
    and ``autotune verify --script`` on it run from an empty directory."""
    text = PAGE.read_text()
    for section in ("model", "workload", "loop"):
        assert f"<!-- code: examples/own_loop.py:{section} (" in text  # a copy, kept equal
    _run([sys.executable, str(SCRIPT), "tune", "--quick"], tmp_path)
    best = tmp_path / "studies" / "own-loop" / "best.yaml"
    out = _run([sys.executable, str(SCRIPT), "train", str(best), "--steps", "80",
                "--eval-every", "40"], tmp_path)
    assert "step 80:" in out and "validation accuracy" in out
    saved = torch.load(tmp_path / "checkpoints" / "last.pt")
    assert saved["step"] == 80 and {"model", "optimizer", "scheduler"} <= set(saved)
    _run([sys.executable, "-m", "autotune", "verify", str(best.parent), "--rounds", "1",
          "--script", str(SCRIPT), "train", str(best), "--steps", "80", "--eval-every", "40"],
         tmp_path)
    verified = json.loads((best.parent / "verify.json").read_text())
    assert verified["how"].startswith("own_loop.py, your script")
    assert all(f[0]["samples_per_sec"] > 0 for f in verified["figures"].values())
