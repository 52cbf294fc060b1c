"""The sharded path's CUDA code on the GPUs there are: NCCL, a CUDA device mesh, bf16 gathers,
prefetch and CPU offload, through the trials' own Training, as one rank per GPU (two at
most; on one GPU a process group of one rank: the collectives between GPUs need a machine
with several)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, child_env

#: The collectives FSDP2 makes a step for the probe's GPT (2 blocks and the root, one group
#: each), per configuration, where the group spans 2 ranks: full_shard gathers the 3 groups
#: for forward and the 2 blocks again for backward (the root keeps its parameters from
#: forward to backward) and reduce-scatters the 3 groups' gradients; shard_grad_op keeps the
#: blocks' parameters too, so forward's 3 all-gathers are all (prefetch moves an all-gather
#: earlier, it adds none). The same counts as tests/test_sharding_launched.py's on gloo ranks,
#: read off the dispatcher's c10d calls, whichever backend runs them; checked on 2 gloo CPU
#: ranks with this probe's model and knobs (5/3 and 3/3, torch 2.14.1, 2026-12-01). In a
#: group of one rank FSDP2 makes none (torch >= 2.9 skips its all-gather and reduce-scatter
#: there: pytorch/pytorch#160135, #162021; 0/0 on one gloo rank, the same day).
COLLECTIVES = {"full_shard": (5, 3), "shard_grad_op_bf16": (3, 3)}


@pytest.mark.gpu
def test_the_sharded_step_runs_on_the_gpus_with_nccl_and_its_knobs(tmp_path: Path) -> None:
    import torch

    ranks = min(2, torch.cuda.device_count())
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={ranks}", str(ROOT / "tests" / "fsdp_gpu_probe.py"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["backend"] == "nccl" and seen["world"] == ranks
    for name in ("full_shard", "shard_grad_op_bf16", "offload"):
        assert seen[name]["sharded"] is True, name
        assert "cuda" in seen[name]["mesh"], seen[name]["mesh"]
        assert all(math.isfinite(v) for v in seen[name]["losses"]), seen[name]
    for name, (gathers, scatters) in COLLECTIVES.items():
        cf = seen[name]["counterfactual"]
        assert cf["synced_step_ms"] > 0 and cf["unsynced_step_ms"] > 0, cf
        assert not cf.get("collectives_error"), cf
        if ranks == 1:  # no collective at all: none counted, none timed
            assert (cf["all_gathers"], cf["reduce_scatters"]) == (0, 0), cf
            assert cf["collectives_source"] is None and cf["all_gather_ms"] is None, cf
        else:  # NCCL's kernels (or its host ranges where a trace lost them), timed
            assert (cf["all_gathers"], cf["reduce_scatters"]) == (gathers, scatters), cf
            assert cf["collectives_source"] in ("nccl_kernels", "nccl_host"), cf
            assert cf["all_gather_ms"] > 0 and cf["reduce_scatter_ms"] > 0, cf
