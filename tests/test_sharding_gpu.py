"""The sharded path's CUDA code on one GPU: NCCL, a CUDA device mesh, bf16 gathers, prefetch
and CPU offload, through the trials' own Training (a process group of one rank: what one GPU
allows; the collectives between GPUs need a machine with several)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, child_env


@pytest.mark.gpu
def test_the_sharded_step_runs_on_one_gpu_with_nccl_and_its_knobs(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         str(ROOT / "tests" / "fsdp_gpu_probe.py"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["backend"] == "nccl"
    for name in ("full_shard", "shard_grad_op_bf16", "offload"):
        assert seen[name]["sharded"] is True, name
        assert "cuda" in seen[name]["mesh"], seen[name]["mesh"]
        assert all(math.isfinite(v) for v in seen[name]["losses"]), seen[name]
    for name in ("full_shard", "shard_grad_op_bf16"):
        cf = seen[name]["counterfactual"]
        assert cf["synced_step_ms"] > 0 and cf["unsynced_step_ms"] > 0, cf
        assert not cf.get("collectives_error"), cf
        # What one rank's profile names its collectives (NCCL's kernels, or its host ranges
        # where a rank of one skips them) is recorded, for the multi-GPU checks to compare.
        print(name, cf)
