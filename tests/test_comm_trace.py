"""The gradient all-reduce in a profile (issue 29 part 5): its time per step, the part backward's
compute hid and the part after it, from the events torch 2.14 records for DDP under gloo; and
DDP's own timing of the same steps as a cross-check. A real 2-rank window (gloo, nothing
mocked) and the arithmetic on small traces built here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.cli.app import ranked
from autotune.cli.config import LaunchConfig
from autotune.core.env import Env
from autotune.core.space import build_space
from autotune.diagnose.comm_trace import comm_fields
from autotune.diagnose.trace_events import merged, minus, overlap
from autotune.diagnose.trace_summary import summarize_trace
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.export import _comm_columns
from autotune.workloads.mlp import MLPWorkload
from tests.conftest import TINY_WINDOW

MAIN, GLOO_A, GLOO_B = 100, 201, 202  # the thread that runs backward; gloo's two threads


def _x(name: str, cat: str, ts_ms: float, end_ms: float, tid: int = MAIN) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts_ms * 1e3, "dur": (end_ms - ts_ms) * 1e3,
            "tid": tid, "pid": 1, "args": {}}


def _gloo_step(at: float) -> list[dict[str, Any]]:
    """One step as a real 2-rank gloo trace has it (names observed in torch 2.14): the
    phases, autograd functions whose AccumulateGrad launches a bucket (c10d::allreduce_), and
    each bucket's gloo:all_reduce on one of gloo's threads (pt_gloo_runloop), two of them at
    once. The last launch blocks its thread for 12 ms (as one did on a rank with one core):
    backward's compute ends where it began, at+58; the phase runs on to at+90 (DDP's wait)."""
    fn = "autograd::engine::evaluate_function: "
    return [
        _x("ProfilerStep#1", "user_annotation", at, at + 100),
        _x("forward", "user_annotation", at, at + 20),
        _x("backward", "user_annotation", at + 20, at + 90),
        _x(fn + "AddmmBackward0", "cpu_op", at + 22, at + 34),
        _x(fn + "torch::autograd::AccumulateGrad", "cpu_op", at + 34, at + 37),
        _x("c10d::allreduce_", "cpu_op", at + 35, at + 36),
        _x(fn + "AddmmBackward0", "cpu_op", at + 41, at + 57),
        _x(fn + "torch::autograd::AccumulateGrad", "cpu_op", at + 57, at + 71),
        _x("c10d::allreduce_", "cpu_op", at + 58, at + 70),
        _x("torch.distributed.ddp.reducer::copy_bucket_to_grad", "cpu_op", at + 85, at + 86),
        _x("optimizer", "user_annotation", at + 90, at + 100),
        _x("gloo:all_reduce", "user_annotation", at + 36, at + 50, GLOO_A),
        _x("gloo:all_reduce", "user_annotation", at + 45, at + 52, GLOO_B),  # overlaps A's
        _x("gloo:all_reduce", "user_annotation", at + 55, at + 80, GLOO_A),
    ]


def test_the_all_reduce_is_split_at_the_end_of_backwards_compute() -> None:
    """Union of gloo's ranges: [36, 52] and [55, 80] = 41 ms a step; backward computes over
    [20, 58] but not in the first launch [35, 36]: 37 ms, of which the all-reduce overlaps
    16 + 3 = 19 ms; after it: [58, 80] = 22 ms (the phase label, which ends at 90 after
    DDP's wait, would have called all of it hidden; the last autograd function's end, 71,
    most of it)."""
    trace = {"traceEvents": _gloo_step(0.0) + [
        {**e, "name": "ProfilerStep#2" if e["name"] == "ProfilerStep#1" else e["name"]}
        for e in _gloo_step(100.0)]}
    comm = summarize_trace(trace, 2)["comm"]
    assert comm["source"] == "gloo" and comm["calls_per_step"] == 2
    assert comm["allreduce_ms_per_step"] == pytest.approx(41.0)
    assert comm["backward_overlap_ms_per_step"] == pytest.approx(19.0)
    assert comm["after_backward_ms_per_step"] == pytest.approx(22.0)
    assert comm["overlap_share"] == pytest.approx(19 / 41, abs=1e-4)
    assert comm["backward_compute_ms_per_step"] == pytest.approx(37.0)


def test_one_process_has_no_all_reduce_and_nccl_kernels_are_timed_on_the_gpu() -> None:
    """No all-reduce event: None. NCCL (names as NCCL >= 2.19 gives them; not verified on a
    GPU here): the all-reduce kernels on the GPU's clock against the GPU's backward range,
    whose compute ends with its last non-NCCL kernel; the host's nccl:all_reduce (an
    enqueue) is not what is timed, nor a broadcast kernel."""
    alone = [e for e in _gloo_step(0.0) if e["name"] not in ("gloo:all_reduce", "c10d::allreduce_")]
    assert summarize_trace({"traceEvents": alone}, 1)["comm"] is None
    gpu = [_x("ProfilerStep#1", "user_annotation", 0, 30),
           _x("backward", "user_annotation", 5, 25),
           _x("nccl:all_reduce", "user_annotation", 10, 10.1),
           _x("backward", "gpu_user_annotation", 10, 60, 7),
           _x("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel",
              2, 4, 8),
           _x("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "kernel", 10, 40, 7),
           _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
              "kernel", 30, 50, 8)]
    comm = summarize_trace({"traceEvents": gpu}, 1)["comm"]
    assert comm["source"] == "nccl_kernels"
    assert comm["allreduce_ms_per_step"] == pytest.approx(20.0)
    assert comm["backward_overlap_ms_per_step"] == pytest.approx(10.0)  # 30-40
    assert comm["after_backward_ms_per_step"] == pytest.approx(10.0)  # 40-50
    assert comm["overlap_share"] == pytest.approx(0.5)


def test_interval_arithmetic() -> None:
    assert merged([(5, 6), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 6)]
    assert overlap([(0, 4), (5, 6)], [(2, 5.5)]) == pytest.approx(2.5)
    assert minus([(0, 10), (12, 14)], [(1, 2), (3, 4), (9, 13)]) == [(0, 1), (2, 3), (4, 9), (13, 14)]
    assert comm_fields([], 0.0, 1.0, 1) is None


def test_a_real_two_rank_window_profiles_its_all_reduce_and_ddp_times_it(
        tmp_path: Path, cpu_env: Env) -> None:
    """2 ranks on gloo under the elastic launcher, profiled: each rank's trace has gloo's
    all-reduce ranges, their time > 0 and the share backward hid within [0, 1], kept for
    rank 0 and the slowest rank; DDP's own timing of the counterfactual's synced steps beside
    the counterfactual's exposed time; trials.csv's columns carry them."""
    env = ranked(cpu_env, LaunchConfig(nproc_per_node=2))
    knobs = build_space(env, MLPWorkload(), {}).baseline
    req = TrialRequest(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, knobs=knobs,
                       device="cpu", trace=True,
                       window={**TINY_WINDOW, "profile": True, "profile_steps": 2},
                       launch={"nproc_per_node": 2, "nnodes": 1, "rdzv_timeout_s": 30,
                               "collective_timeout_s": 60, "backend": "gloo"})
    res = run_window(req, tmp_path / "w")
    assert res.ok, f"{res.error}\n{res.stderr_tail}"
    assert (tmp_path / "w" / "trace.json").exists() and (tmp_path / "w" / "trace.rank1.json").exists()
    traced = res.comm["trace"]
    for who in ("rank0", "slowest"):
        figures = traced[who]
        assert figures["source"] == "gloo", figures
        assert figures["calls_per_step"] >= 1
        assert figures["allreduce_ms_per_step"] > 0
        assert 0.0 <= figures["overlap_share"] <= 1.0
        assert figures["backward_overlap_ms_per_step"] + figures["after_backward_ms_per_step"] \
            <= figures["allreduce_ms_per_step"] + 1e-3
    assert res.trace["comm"] == traced["slowest"]  # the trial's trace summary is the slowest's
    # DDP times every synced step of the counterfactual (gloo's reducer samples them).
    assert res.comm["ddp_note"] is None, res.comm
    assert res.comm["ddp_steps"] >= 5 and res.comm["ddp_comm_ms"] > 0
    assert 0.0 <= res.comm["ddp_overlap_share"] <= 1.0
    assert res.comm["exposed_ms"] >= 0
    columns = _comm_columns(res.comm, res.ranks)
    assert columns["comm.trace_allreduce_ms"] > 0 and columns["comm.ddp_comm_ms"] > 0
    assert 0.0 <= columns["comm.trace_overlap_share_rank0"] <= 1.0
