"""autotune.measure.profiling: the capture (real, on this CPU) and the pure trace summary (stored real
CPU traces, plus a hand-built CUDA trace for the GPU-only fields)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.core.training import Training
from autotune.measure.profiling import capture, is_low_precision_kernel, summarize_trace
from tests.workloads_diag import ComputeWorkload, SleepyLoaderWorkload, baseline_knobs

DATA = Path(__file__).resolve().parent / "data"
GPU_FIELDS = ("gpu_busy_pct", "kernels_per_step", "kernel_median_us", "short_kernel_share",
              "low_precision_kernel_share", "h2d_ms_per_step", "h2d_bytes_per_step",
              "launches_per_step")


def _stored(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"{name}.trace.json").read_text())


# --- stored real traces (recorded with `python tests/workloads_diag.py`) ----------------------
def test_stored_traces_are_small() -> None:
    for name in ("sleepy_cpu", "compute_cpu"):
        assert (DATA / f"{name}.trace.json").stat().st_size < 300_000


def test_summary_of_sleepy_loader_trace() -> None:
    s = summarize_trace(_stored("sleepy_cpu"), 2)
    assert "error" not in s
    assert s["steps"] == 2 and s["device"] == "cpu"
    for key in GPU_FIELDS:
        assert s[key] is None, key
    # The loader's sleep dominates the step: most of the wall time is the `data` range.
    assert s["data_ms_per_step"] / s["wall_ms_per_step"] > 0.4
    assert set(s["phase_ms_per_step"]) == {"copy", "forward", "backward", "optimizer"}
    assert all(v is not None and v > 0 for v in s["phase_ms_per_step"].values())
    assert 0 < s["cpu_op_ms_per_step"] < s["wall_ms_per_step"]
    assert s["syncs_per_step"] == 0
    assert s["peak_allocated_mb"]["cpu"] > 0 and s["peak_allocated_mb"]["cuda"] is None
    json.dumps(s)


def test_summary_of_compute_trace() -> None:
    s = summarize_trace(_stored("compute_cpu"), 2)
    assert "error" not in s and s["steps"] == 2
    assert s["data_ms_per_step"] / s["wall_ms_per_step"] < 0.1
    # Nearly all the step is spent inside ops, mostly the matmuls.
    assert s["cpu_op_ms_per_step"] / s["wall_ms_per_step"] > 0.7
    top = [op["name"] for op in s["top_cpu_ops"]]
    assert {"aten::mm", "aten::addmm"} & set(top[:2])
    assert s["phase_ms_per_step"]["forward"] > 0 and s["phase_ms_per_step"]["backward"] > 0
    # 128 samples / 64 per batch: a new epoch starts inside the capture, and the RandomSampler
    # draws its seed with .item(): a scalar read of a CPU tensor, which waits on no device.
    assert s["scalar_reads_per_step"] == 0.5 and s["host_scalar_reads_per_step"] == 0.5
    assert s["syncs_per_step"] == 0 and s["copy_syncs_per_step"] == 0


def test_steps_argument_is_a_fallback_only() -> None:
    trace = _stored("sleepy_cpu")
    assert summarize_trace(trace, 7)["steps"] == 2  # ProfilerStep# events win
    no_steps = {"traceEvents": [e for e in trace["traceEvents"]
                                if not e.get("name", "").startswith("ProfilerStep#")]}
    assert summarize_trace(no_steps, 4)["steps"] == 4


# --- a hand-built CUDA trace: the GPU fields' arithmetic --------------------------------------
def _x(name: str, cat: str, ts: float, dur: float, tid: Any = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat != "kernel" else 0, "tid": tid,
            "ts": ts, "dur": dur, "args": args}


def _cuda_trace() -> dict[str, Any]:
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        _x("PyTorch Profiler (0)", "Trace", 900, 3000, tid="PyTorch Profiler") | {"pid": "Spans"},
        _x("ProfilerStep#1", "user_annotation", 1000, 1000),
        _x("ProfilerStep#2", "user_annotation", 2000, 1000),
        _x("data", "user_annotation", 1001, 8),
        _x("data", "user_annotation", 2001, 12),
        # copy: a pageable copy, which synchronizes (a copy sync, not a step sync)
        _x("copy", "user_annotation", 1010, 100),
        _x("cudaMemcpyAsync", "cuda_runtime", 1020, 30),
        _x("cudaStreamSynchronize", "cuda_runtime", 1055, 40),
        _x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 1030, 20, tid=7, bytes=4096),
        # forward with one .item(): item > _local_scalar_dense > memcpy + sync (one sync)
        _x("forward", "user_annotation", 1200, 300),
        _x("aten::item", "cpu_op", 1300, 60),
        _x("aten::_local_scalar_dense", "cpu_op", 1305, 50),
        _x("cudaMemcpyAsync", "cuda_runtime", 1310, 10),
        _x("cudaStreamSynchronize", "cuda_runtime", 1325, 25),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 1312, 3, tid=7, bytes=4),
        _x("forward", "gpu_user_annotation", 1100, 400, tid=7),
        # launches: 3 runtime; 1 driver alone (triton); 1 driver nested in a runtime launch
        _x("cudaLaunchKernel", "cuda_runtime", 1090, 5),
        _x("cudaLaunchKernel", "cuda_runtime", 1240, 5),
        _x("cudaLaunchKernelExC", "cuda_runtime", 1390, 5),
        _x("cuLaunchKernel", "cuda_driver", 2090, 5),
        _x("cudaLaunchKernel", "cuda_runtime", 2400, 10),
        _x("cuLaunchKernel", "cuda_driver", 2402, 5),
        # GPU activity (kernel 0 started in the discarded warm-up step: outside the window)
        _x("warmup_leftover_kernel", "kernel", 950, 40, tid=7),
        _x("ampere_sgemm_128x64_nn", "kernel", 1100, 200, tid=7),
        _x("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", "kernel",
           1250, 5, tid=7),
        _x("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", "kernel", 1400, 100,
           tid=7),
        _x("Memset (Device)", "gpu_memset", 2050, 2, tid=7),
        _x("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn", "kernel", 2100, 300, tid=7),
        _x("void elementwise_kernel<128, 4>", "kernel", 2500, 8, tid=7),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
         "ts": 1300, "args": {"Total Allocated": 3 * 2**20, "Device Type": 1, "Bytes": 4}},
        {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 1300, "cat": "ac2g", "name": "ac2g"},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}],
            "traceEvents": ev}


def test_syncs_inside_the_device_input_stages_are_counted_apart() -> None:
    """A device stage (decode_jpeg on a GPU reads each image's host bytes in with a blocking
    copy: 22 syncs a step at batch 32 on an H100) runs inside ``forward``, in a ``stages``
    range of its own: its syncs are counted apart from the training code's."""
    trace = _cuda_trace()
    trace["traceEvents"] += [
        _x("stages", "user_annotation", 1210, 80),
        _x("cudaMemcpy", "cuda_runtime", 1220, 10),
        _x("cudaStreamSynchronize", "cuda_runtime", 1240, 10),
        _x("cudaStreamSynchronize", "cuda_runtime", 1260, 10),
    ]
    s = summarize_trace(trace, 2)
    assert s["syncs_per_step"] == 2.5  # the .item() and the copy's, plus the stages' 3 over 2
    assert s["stage_syncs_per_step"] == 1.5 and s["copy_syncs_per_step"] == 0.5


def test_cuda_fields_from_a_hand_built_trace() -> None:
    s = summarize_trace(_cuda_trace(), 2)
    assert "error" not in s
    assert s["steps"] == 2 and s["device"] == "cuda"
    assert s["wall_ms_per_step"] == pytest.approx(1.0)
    # union of kernels + copies + memset = 200+100+300+8 + 20+3 + 2 us over 2000 us
    assert s["gpu_busy_pct"] == pytest.approx(100 * 633 / 2000, abs=0.01)
    assert s["kernels_per_step"] == 2.5
    assert s["kernel_median_us"] == 100
    assert s["short_kernel_share"] == pytest.approx(2 / 5)
    assert s["low_precision_kernel_share"] == pytest.approx(400 / 613, abs=1e-3)
    assert s["top_kernels"][0]["name"].startswith("ampere_fp16_s16816gemm")
    assert s["h2d_ms_per_step"] == pytest.approx(0.01)
    assert s["h2d_bytes_per_step"] == 2048
    assert s["d2h_copies_per_step"] == 0.5
    # one .item() (its nested sync not counted twice) + the copy's sync
    assert s["syncs_per_step"] == 1.0
    assert s["copy_syncs_per_step"] == 0.5
    assert s["sync_ms_per_step"] == pytest.approx((50 + 40) / 2 / 1e3)
    assert s["launches_per_step"] == 2.5
    assert s["data_ms_per_step"] == pytest.approx(0.01)
    assert s["phase_ms_per_step"] == {"copy": 0.05, "forward": 0.15, "backward": None,
                                      "optimizer": None}
    assert s["phase_gpu_ms_per_step"]["forward"] == pytest.approx(0.2)
    assert s["cpu_op_ms_per_step"] == pytest.approx(0.03)
    assert s["peak_allocated_mb"]["cuda"] == pytest.approx(3.0)
    json.dumps(s)


def test_low_precision_heuristic() -> None:
    yes = ["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_nn", "sm90_xmma_gemm_bf16bf16_bf16f32",
           "cutlass_80_tensorop_h16816gemm_64x64_32x6_tn_align8",
           "void at::native::vectorized_elementwise_kernel<4, c10::BFloat16>",
           "volta_h884gemm_256x128_ldg8_nn", "sm90_gemm_f16_tn"]
    no = ["ampere_sgemm_128x64_nn", "void at::native::reduce_kernel<512, 1>",
          "cutlass_80_simt_sgemm_256x128_8x4_nn_align1", "gemm_64x64x16_kernel"]
    assert all(is_low_precision_kernel(n) for n in yes)
    assert not any(is_low_precision_kernel(n) for n in no)


@pytest.mark.parametrize("trace", [
    {}, {"traceEvents": []}, {"traceEvents": "garbage"}, [], {"traceEvents": [None, 3, "x"]},
    {"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": "soon", "dur": None},
                     {"ph": "X", "name": 5, "ts": 1, "dur": 1},
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -4},
                     {"ph": "i", "name": "[memory]", "args": {"Device Type": "gpu"}},
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": 2, "dur": 3, "args": 7}]},
])
def test_unexpected_trace_shapes_do_not_raise(trace: Any) -> None:
    s = summarize_trace(trace, 3)
    assert isinstance(s, dict)
    json.dumps(s)


# --- the real capture, end to end on this CPU ------------------------------------------------
def _endless(run: Training) -> Any:
    while True:
        yield from run.loader


@pytest.mark.parametrize("workload", [SleepyLoaderWorkload(sleep_ms=1.0), ComputeWorkload(width=256)],
                         ids=["sleepy", "compute"])
def test_capture_writes_trace_and_returns_summary(tmp_path: Path, workload: Any) -> None:
    run = Training(workload, baseline_knobs(workload), "cpu")
    batches = _endless(run)
    run.step(*run.to_device(*next(batches)))
    path = tmp_path / "trial" / "trace.json"
    s = capture(run, batches, 2, str(path))
    assert "error" not in s, s
    trace = json.loads(path.read_text())
    assert sum(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"]) == 2
    assert s == {**summarize_trace(trace, 2), "trace_path": str(path)}
    assert s["steps"] == 2 and s["device"] == "cpu"
    assert s["data_ms_per_step"] > 0 and s["wall_ms_per_step"] > 0
    assert s["phase_ms_per_step"]["forward"] > 0
    json.dumps(s)


class _Broken:
    device = "cpu"

    def to_device(self, inputs: Any, targets: Any) -> tuple[Any, Any]:
        return inputs, targets

    def step(self, inputs: Any, targets: Any) -> Any:
        raise RuntimeError("boom in the step")


def test_capture_failure_is_reported_not_raised(tmp_path: Path) -> None:
    import torch

    batches = iter([(torch.zeros(2), torch.zeros(2))] * 10)
    s = capture(_Broken(), batches, 2, str(tmp_path / "trace.json"))
    assert s == {"error": "RuntimeError: boom in the step"}
    s = capture(_Broken(), iter([]), 2, str(tmp_path / "trace2.json"))
    assert s["error"].startswith("StopIteration")
