"""Builds tests/data/adamw_cuda.trace.json: two profiled steps of a small model trained with
AdamW on CUDA, as torch.profiler (Kineto) writes them: host events on the python thread
(``cpu_op``, ``user_annotation``, ``cuda_runtime`` with their correlation ids), GPU events on
device 0 / stream 7 (``kernel``, ``gpu_memcpy``, ``gpu_user_annotation``), ``ac2g`` flows.

Each step reads the loss once (``loss.item()`` on a CUDA tensor: aten::item >
aten::_local_scalar_dense > cudaMemcpyAsync + cudaStreamSynchronize, and a 4-byte DtoH copy on
the GPU), and AdamW reads its step counters, CPU tensors, twice per parameter
(aten::item > aten::_local_scalar_dense with no runtime call inside). Synthetic, because no
GPU is lent to the session that wrote it; the names and args follow torch 2.x's exporter.

    python -m tests.make_adamw_trace   # rewrites the stored file
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.workloads_diag import DATA

PID, TID, DEV, STREAM = 4242, 4242, 0, 7
PARAMS = 6  # 2 counter reads each per step: 12 host scalar reads, 1 device read
STEP_US = 1000.0


class _Trace:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 100

    def host(self, name: str, cat: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID,
                            "ts": ts, "dur": dur, "args": args})

    def gpu(self, name: str, cat: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": DEV, "tid": STREAM,
                            "ts": ts, "dur": dur, "args": {"device": DEV, "stream": STREAM, **args}})

    def launch(self, ts: float, kernel: str, gpu_ts: float, gpu_dur: float) -> None:
        self.corr += 1
        self.host("cudaLaunchKernel", "cuda_runtime", ts, 4, cbid=211, correlation=self.corr)
        self.gpu(kernel, "kernel", gpu_ts, gpu_dur, correlation=self.corr)
        self.events.append({"ph": "s", "id": self.corr, "pid": PID, "tid": TID, "ts": ts,
                            "cat": "ac2g", "name": "ac2g"})

    def memcpy(self, ts: float, kind: str, gpu_ts: float, nbytes: int) -> None:
        self.corr += 1
        self.host("cudaMemcpyAsync", "cuda_runtime", ts, 8, cbid=41, correlation=self.corr)
        self.gpu(f"Memcpy {kind}", "gpu_memcpy", gpu_ts, 3, correlation=self.corr, bytes=nbytes)


def _step(t: _Trace, n: int, t0: float) -> None:
    t.host(f"ProfilerStep#{n}", "user_annotation", t0, STEP_US)
    t.host("data", "user_annotation", t0 + 2, 10)
    t.host("copy", "user_annotation", t0 + 15, 30)
    t.memcpy(t0 + 20, "HtoD (Pinned -> Device)", t0 + 25, 65536)
    t.host("forward", "user_annotation", t0 + 50, 300)
    t.host("aten::linear", "cpu_op", t0 + 55, 40)
    t.launch(t0 + 60, "ampere_sgemm_64x32_sliced1x4_tn", t0 + 70, 60)
    t.host("aten::cross_entropy_loss", "cpu_op", t0 + 100, 30)
    t.launch(t0 + 110, "void at::native::cunn_SoftMaxForward<4, float>", t0 + 135, 8)
    # loss.item() on the CUDA loss: the host waits for the device
    t.host("aten::item", "cpu_op", t0 + 200, 120)
    t.host("aten::_local_scalar_dense", "cpu_op", t0 + 202, 116)
    t.memcpy(t0 + 205, "DtoH (Device -> Pageable)", t0 + 300, 4)
    t.corr += 1
    t.host("cudaStreamSynchronize", "cuda_runtime", t0 + 215, 100, cbid=131, correlation=t.corr)
    t.host("backward", "user_annotation", t0 + 360, 200)
    t.launch(t0 + 370, "ampere_sgemm_32x32_sliced1x4_nt", t0 + 380, 50)
    t.host("optimizer", "user_annotation", t0 + 580, 400)
    t.host("Optimizer.step#AdamW.step", "user_annotation", t0 + 585, 390)
    ts = t0 + 590
    for _ in range(PARAMS):  # step += 1, then two reads of the CPU step counter
        t.host("aten::add_", "cpu_op", ts, 6)
        for _ in range(2):
            t.host("aten::item", "cpu_op", ts + 8, 10)
            t.host("aten::_local_scalar_dense", "cpu_op", ts + 9, 8)
            ts += 12
        ts += 20
    t.host("aten::_foreach_lerp_", "cpu_op", ts, 20)
    t.launch(ts + 5, "void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>>", ts + 20, 12)
    t.gpu("forward", "gpu_user_annotation", t0 + 70, 240)
    t.gpu("optimizer", "gpu_user_annotation", ts + 20, 12)


def build() -> dict[str, Any]:
    t = _Trace()
    t.events.append({"ph": "M", "name": "process_name", "pid": PID, "tid": 0,
                     "args": {"name": "python"}})
    for n in (1, 2):
        _step(t, n, 10_000.0 + (n - 1) * STEP_US)
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "displayTimeUnit": "ms", "traceEvents": t.events}


def main() -> int:
    out = DATA / "adamw_cuda.trace.json"
    out.write_text(json.dumps(build(), indent=0, separators=(",", ":")))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
