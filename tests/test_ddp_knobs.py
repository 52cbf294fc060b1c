"""The DDP knobs beyond the wrapper's size arguments (issue 29): ``accumulation_no_sync``,
``comm_hook`` and ``batched_grad_copy``, applied by the trials' own step on real gloo ranks
under torchrun (nothing mocked), their domains, their numerics family and their export."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cli.app import ranked
from autotune.cli.config import LaunchConfig
from autotune.cli.validate import check_launch
from autotune.core.distributed import ddp_kwargs, has_ddp_argument
from autotune.core.env import Env
from autotune.core.knobs import KnobError
from autotune.core.space import build_space, keep_global_batch, without_accumulation
from autotune.diagnose.verdicts import diagnose
from autotune.results.launch_export import ddp_step_section
from autotune.search.checks.numerics import families
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import ROOT, child_env, study_setup

#: torch 2.14's DistributedDataParallel takes batched_grad_copy; 2.11 (a GPU machine's) does not,
#: and there the knob is neither searched, offered nor applied.
BATCHED = has_ddp_argument("batched_grad_copy")


def test_each_ddp_step_knob_is_applied_on_real_ranks(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(ROOT / "tests" / "ddp_step_probe.py"), str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    plain, no_sync = seen["plain"], seen["no_sync"]
    # Without the knob every micro-batch's backward all-reduces; with it, the first one of
    # the cycle keeps each rank's own gradients, and the cycle's last averages their sum:
    # the same gradients as syncing every micro-batch.
    assert plain["averaged_after_first_micro_batch"] is True
    assert no_sync["averaged_after_first_micro_batch"] is False
    assert no_sync["averaged_after_cycle"] is True
    assert no_sync["grads"] == pytest.approx(plain["grads"], abs=1e-6)
    # The all-reduce's counterfactual times whole accumulation cycles where only one of their
    # micro-batches all-reduces (a median of single micro-steps would read an unsynced one).
    assert plain["counterfactual"]["micro_steps_per_unit"] == 1
    assert no_sync["counterfactual"]["micro_steps_per_unit"] == 2
    assert no_sync["counterfactual"]["synced_step_ms"] > 0
    # bf16 compression: the hook is DDP's, and the sum is rounded (close, not equal).
    hooked = seen["bf16_hook"]
    assert hooked["comm_hook"] == "bf16_compress_hook" and plain["comm_hook"] is None
    assert hooked["grads"] != plain["grads"]
    assert hooked["grads"] == pytest.approx(plain["grads"], abs=2e-3)
    batched = seen["batched"]
    assert batched["batched_grad_copy"] is BATCHED and batched["gradient_as_bucket_view"] is True
    assert batched["grads"] == pytest.approx(plain["grads"], abs=1e-6)


def test_the_step_knobs_are_searched_only_where_they_can_matter(cpu_env: Env) -> None:
    env = cpu_env
    one = build_space(env, MLPWorkload(), {})
    for name in ("comm_hook", "accumulation_no_sync", "batched_grad_copy"):
        why = "one process" if BATCHED or name != "batched_grad_copy" else "torch 2.14 and later"
        assert len(one.domains[name].values) == 1 and why in one.domains[name].reason

    two_env = ranked(env, LaunchConfig(nproc_per_node=2))
    two = build_space(two_env, MLPWorkload(), {})
    # Compression changes the numerics: opt-in, the reason says how to list it.
    assert two.domains["comm_hook"].values == ["none"]
    assert "knobs.comm_hook=[none,bf16]" in two.domains["comm_hook"].reason
    listed = build_space(two_env, MLPWorkload(), {"comm_hook": ["none", "bf16"]})
    assert listed.domains["comm_hook"].values == ["none", "bf16"]
    with pytest.raises(KnobError, match="comm_hook"):
        build_space(env, MLPWorkload(), {"comm_hook": ["none", "bf16"]})  # one process
    assert two.domains["batched_grad_copy"].values == ([False, True] if BATCHED else [False])

    # No accumulation, no micro-batch to skip the all-reduce on.
    flat = without_accumulation(two)
    assert flat.domains["accumulation_no_sync"].values == [False]
    assert "keep_global_batch" in flat.domains["accumulation_no_sync"].reason
    accumulating = keep_global_batch(two, 32)
    assert accumulating.domains["accumulation_no_sync"].values == [False, True]
    pinned = build_space(two_env, MLPWorkload(), {"accumulation_no_sync": True})
    with pytest.raises(KnobError, match="study.keep_global_batch=true"):
        without_accumulation(pinned)


def test_the_step_knobs_export_for_a_script_without_the_runtime() -> None:
    knobs = {"bucket_cap_mb": 25, "gradient_as_bucket_view": True, "static_graph": False,
             "broadcast_buffers": True, "batched_grad_copy": True, "comm_hook": "bf16",
             "accumulation_no_sync": True}
    assert ddp_kwargs(knobs, "2.14.1+cu130")["batched_grad_copy"] is True
    assert "batched_grad_copy" not in ddp_kwargs(knobs, "2.11.0+cu130")  # not there yet
    step = ddp_step_section(knobs)
    assert step["comm_hook"].endswith("default_hooks.bf16_compress_hook")
    assert step["register"] == "model.register_comm_hook(None, bf16_compress_hook)"
    assert step["accumulation_no_sync"] is True
    assert ddp_step_section({"comm_hook": "none"})["comm_hook"] is None


def test_a_compressed_all_reduce_is_checked_as_its_own_numerics_family() -> None:
    assert families({"comm_hook": "bf16"}, {"comm_hook": "none"}) == ["comm_hook"]
    assert families({"accumulation_no_sync": True}, {"accumulation_no_sync": False}) == ["default"]


def test_the_communication_verdict_offers_the_step_knobs_the_study_searches(cpu_env: Env) -> None:
    """Accumulating: one all-reduce per optimizer step is the first fix; a listed bf16 hook
    is offered too. Where the study cannot use them they are neither offered nor named."""
    two = build_space(ranked(cpu_env, LaunchConfig(nproc_per_node=2)), MLPWorkload(),
                      {"comm_hook": ["none", "bf16"]})
    knobs = {**two.baseline, "batch_size": 32}
    result = {"samples_per_sec": 1000.0, "step_ms": {"median": 10.0}, "peak_memory_gb": 0.1,
              "timers": {"data_wait": 0.02, "compute": 0.9},
              "comm": {"exposed_share": 0.41, "exposed_ms": 4.1}}
    accumulating = keep_global_batch(two, 64)
    verdict = diagnose(result, knobs, "cpu", 10, domains=accumulating.domains)
    fixes = [f["knob"] for f in verdict["fixes"]]
    assert verdict["bottleneck"] == "communication" and fixes[0] == "accumulation_no_sync"
    assert "comm_hook" in fixes and ("batched_grad_copy" in fixes) is BATCHED
    plain = diagnose(result, knobs, "cpu", 10,
                     domains=without_accumulation(build_space(
                         ranked(cpu_env, LaunchConfig(nproc_per_node=2)), MLPWorkload(), {})).domains)
    named = [f["knob"] for f in plain["fixes"]] + [r["knob"] for r in plain["ruled_out"]]
    assert "accumulation_no_sync" not in named and "comm_hook" not in named


def test_scaling_needs_ranks_and_is_in_the_wall_time_estimate(cpu_env: Env) -> None:
    from autotune.cli.crash import UsageError
    from autotune.search.console.estimate import estimate

    with pytest.raises(UsageError, match="launch.nproc_per_node=N"):
        check_launch(LaunchConfig(scaling=True), cpu_env)
    setup = study_setup(cpu_env, launch=LaunchConfig(scaling=True), confirm_top=1,
                        numerics_steps=0)
    est = estimate(setup, 4, 0, 1.0, 2.0, {"extras_s": 0.5})
    assert est.scaling_s == pytest.approx(2 * 3 * 1.5)  # 3 rounds, two windows each
    assert "scaling ~9 s" in est.words()
