"""Tests of the launched run that fail when what they test is broken: a communication-bound
verdict actually reached, replicated and sharded, a compute-heavy model's measured share (its
median, not only its bound) small, replicated and sharded, and the cores a running rank is
pinned to read from the rank itself.
Real ranks under PyTorch's elastic launcher (gloo), nothing mocked."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from autotune.core.distributed import rank_cores
from tests.conftest import TINY_ARGS, run_cli

LAUNCH = ["device=cpu", "launch.nproc_per_node=2", "study.numerics_steps=0", "study.n_trials=1",
          "study.confirm_runs=0", "study.remeasure_contended=0"]


def _row(tmp_path: Path, name: str) -> dict[str, str]:
    with open(tmp_path / "studies" / name / "trials.csv") as f:
        (row,) = list(csv.DictReader(f))
    return row


#: What each wrapper's communication verdict says.
COMM_WORDS = {"no_shard": "waits on the gradient all-reduce",
              "full_shard": "waits on FSDP2's collectives"}


@pytest.mark.parametrize("sharding", ["no_shard", "full_shard"])
def test_a_wide_mlp_is_diagnosed_communication_bound_on_ranks_pinned_to_their_own_cores(
        tmp_path: Path, sharding: str) -> None:
    """13 MB of gradients behind a step of 4 samples, replicated (DDP's all-reduce) or sharded
    (FSDP2: the MLP names no blocks, so one group, the root's: one all-gather of its 13 MB of
    parameters and one reduce-scatter of its gradients a step, neither hidden behind any
    compute): the counterfactual's lower bound reaches the verdict's 25%, above 0 measured,
    and the verdict is communication, with the wrapper's own fixes. Each rank read its own
    affinity while it ran: disjoint sets, each the share rank_cores gives it."""
    (tmp_path / "aff").mkdir()
    # A second study where the first's lower bound missed: the bound is a sign test over 10
    # pairs of steps, and one .ci/run (2026-11-29) read 0.19 where five idle runs read
    # 0.31-0.50. A broken verdict misses twice.
    for attempt in range(2):
        name = f"w{attempt}"
        proc = run_cli(["workload._target_=tests.workloads_shard.AffinityWideMLP",
                        f"+workload.report_dir={tmp_path / 'aff'}", f"study.name={name}",
                        f"knobs.sharding={sharding}", *LAUNCH, *TINY_ARGS], tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        row = _row(tmp_path, name)
        if float(row["comm.exposed_share_low"]) >= 0.25:
            break
    assert row["knob.sharding"] == sharding
    assert float(row["comm.exposed_share_low"]) >= 0.25, {
        k: v for k, v in row.items() if k.startswith(("comm.", "contention", "step_ms"))}
    assert float(row["comm.exposed_share"]) >= float(row["comm.exposed_share_low"])
    if sharding == "full_shard":  # the root's one group: it was sharded
        assert (float(row["comm.all_gathers"]), float(row["comm.reduce_scatters"])) == (1, 1)
    assert row["bottleneck"] == "communication", row["diagnosis"]
    assert COMM_WORDS[sharding] in row["diagnosis"], row["diagnosis"]
    # DDP's fixes for DDP's ranks only (FSDP2's are sharded_communication's).
    assert ("gradient_as_bucket_view=True" in row["fixes"]) == (sharding == "no_shard"), row
    seen = {r: {int(c) for c in (tmp_path / "aff" / f"affinity.rank{r}").read_text().split(",")}
            for r in (0, 1)}
    assert len(seen) == 2 and not seen[0] & seen[1], seen
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) >= 2:
        assert seen == {r: set(rank_cores(r, 2, usable)) for r in (0, 1)}


@pytest.mark.parametrize("sharding", ["no_shard", "full_shard"])
def test_a_model_that_computes_far_more_than_it_communicates_is_not_communication_bound(
        tmp_path: Path, sharding: str) -> None:
    """A GPT of 2 small blocks over 1024-token sequences (attention's work grows with the
    square of the sequence, its parameters do not), replicated (DDP's all-reduce) or sharded
    (FSDP2's all-gathers and reduce-scatters): the communication adds little to its step,
    measured so at the median, not only at the bound, and the verdict is not communication.
    Alone on the machine's cores: a study run beside another (tests/test_ddp.py's two at once)
    measures that other's load too."""
    # A second study where the first's median read 0.10 or more: one .ci/run (2026-12-02, a
    # machine whose hypervisor took 6-20% of the CPU time) read 0.11 for full_shard, where the
    # median of pairs of steps also holds FSDP2's hooks and copies on two busy cores. An
    # estimator that reads this model as communicating misses twice.
    for attempt in range(2):
        proc = run_cli(["workload=gpt", "workload.vocab=64", "workload.seq_len=1024",
                        "workload.d_model=32", "workload.n_layer=2", "workload.n_head=2",
                        "workload.batch_size=16", f"knobs.sharding={sharding}",
                        f"study.name=g{attempt}", *LAUNCH, *TINY_ARGS], tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        row = _row(tmp_path, f"g{attempt}")
        if float(row["comm.exposed_share"]) < 0.10:
            break
    assert row["knob.sharding"] == sharding
    if sharding == "full_shard":
        assert float(row["comm.all_gathers"]) == 5  # the blocks and the root: it was sharded
    assert float(row["comm.exposed_share"]) < 0.10, row
    assert row["bottleneck"] != "communication"
