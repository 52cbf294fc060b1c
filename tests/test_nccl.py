"""Launched trials at world size 1, the only NCCL run one GPU allows (NCCL refuses two ranks
on one device): the launcher's trial through the backend, and every collective autotune
issues (the ranks' agreement at chunk edges, the gathered readings, DDP's all-reduce with a
compression hook, the parity side's summed rates) with NCCL's device tensors. The same runs
with gloo on the CPU keep the scripts honest where no GPU is. What one rank cannot show needs
a machine of several GPUs: an all-reduce that crosses devices, its exposed share of the step
(measured only with ranks > 1), and NCCL's kernels in the profile (diagnose/comm_trace.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.env import probe
from autotune.core.space import build_space
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, TINY_WINDOW

BACKENDS = [pytest.param("cpu", id="gloo"), pytest.param("cuda", id="nccl", marks=pytest.mark.gpu)]
MLP = {"_target_": "autotune.workloads.mlp.MLPWorkload", "n_samples": 512}

COLLECTIVES = """
import sys, torch, torch.distributed as dist
from autotune.core import distributed
from autotune.measure import comm
from autotune.production.parity import _summed_over_ranks
cuda = sys.argv[1] == "cuda"
dist.init_process_group("nccl" if cuda else "gloo")
if cuda:
    torch.cuda.set_device(0)
dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(dev)
knobs = {"bucket_cap_mb": 1, "gradient_as_bucket_view": True, "static_graph": False,
         "broadcast_buffers": True, "comm_hook": "bf16", "batched_grad_copy": False}
ddp = distributed.wrap(model, knobs, dev)
loss = ddp(torch.randn(32, 64, device=dev)).square().mean()
loss.backward()
assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
assert comm.agree([3, 1]) == [3, 1]
assert comm._gather([1.5, 2.0]) == [[1.5, 2.0]]
comm.barrier()
summed = _summed_over_ranks({"samples_per_sec": 10.0}, 1)
assert summed["over_ranks"] == "summed" and summed["samples_per_sec"] == 10.0
print("backend", dist.get_backend(), "world", dist.get_world_size())
dist.destroy_process_group()
"""


@pytest.mark.parametrize("device", BACKENDS)
def test_a_launched_trial_runs_through_the_backend_at_world_size_one(
        device: str, tmp_path: Path) -> None:
    """The launcher's path with one rank (NCCL on the one GPU): process group, device, rank
    pinning, the merged result; the study's parent never touches CUDA."""
    env = probe(device)
    wl = MLPWorkload(n_samples=512)
    knobs = build_space(env, wl, {}).baseline
    req = TrialRequest(workload=MLP, knobs=knobs, device=device, window=TINY_WINDOW,
                       launch={"nproc_per_node": 1, "nnodes": 1, "rdzv_timeout_s": 30,
                               "collective_timeout_s": 60,
                               "backend": "nccl" if device == "cuda" else "gloo"})
    result = run_window(req, tmp_path)
    assert result.outcome == "ok", result.error
    assert result.samples_per_sec > 0 and result.peak_memory_gb > 0
    # Through the launcher: its rank 0 logged under the trial's folder.
    assert list((tmp_path / "ranks").rglob("0/stderr.log")), "the trial did not launch ranks"


@pytest.mark.parametrize("device", BACKENDS)
def test_every_collective_autotune_issues_runs_on_the_backends_tensors(device: str) -> None:
    """DDP with a compression hook and small buckets, the chunk-edge agreement, the gathered
    readings and the parity side's summed rates, under torchrun (NCCL: device tensors)."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         "--no-python", sys.executable, "-c", COLLECTIVES, device],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    backend = "nccl" if device == "cuda" else "gloo"
    assert f"backend {backend} world 1" in done.stdout
