"""A scalar read is a synchronization only when it waits on the device.

AdamW reads its step counters (CPU tensors) with .item(), twice per parameter per step: on the
H100, gpt's baseline read as 152 "host-device synchronizations per step" and every eager trial
was diagnosed ``sync``. The stored trace (tests/make_adamw_trace.py) holds both kinds."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch

from autotune.diagnose.verdicts import diagnose
from autotune.measure.profiling import summarize_trace
from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from tests.make_adamw_trace import PARAMS, build
from tests.workloads_diag import DATA, baseline_knobs

GPT_TINY = {"_target_": "autotune.workloads.gpt.GPTWorkload", "vocab": 512, "seq_len": 64, "d_model": 64,
            "n_layer": 4, "n_head": 4, "n_sequences": 512, "batch_size": 16}


def _stored() -> dict[str, Any]:
    return json.loads((DATA / "adamw_cuda.trace.json").read_text())


def test_stored_trace_is_the_builders() -> None:
    assert _stored() == json.loads(json.dumps(build()))


def test_adamw_counter_reads_are_not_syncs_but_a_cuda_item_is() -> None:
    s = summarize_trace(_stored(), 2)
    assert s["device"] == "cuda"
    assert s["scalar_reads_per_step"] == 2 * PARAMS + 1
    assert s["host_scalar_reads_per_step"] == 2 * PARAMS  # AdamW's CPU step counters
    assert s["syncs_per_step"] == 1  # loss.item(): a DtoH copy and a stream sync inside it
    assert s["sync_ms_per_step"] == pytest.approx(0.116)


def test_adamw_trace_is_not_diagnosed_sync() -> None:
    trace = summarize_trace(_stored(), 2)
    result = {"outcome": "ok", "samples_per_sec": 1000.0, "step_ms": {"median": 1.0},
              "peak_memory_gb": 1.0, "trace": trace,
              "timers": {"data_wait": 0.01, "h2d": 0.03, "compute": 0.55, "optimizer": 0.4}}
    knobs = {"batch_size": 16, "amp": "off", "compile": "off", "optimizer_impl": "foreach"}
    d = diagnose(result, knobs, "cuda", 80.0)
    assert d["bottleneck"] != "sync", d
    # the old rule counted every read: 13 a step, past the sync threshold
    old = dict(trace, syncs_per_step=trace["scalar_reads_per_step"])
    assert diagnose({**result, "trace": old}, knobs, "cuda", 80.0)["bottleneck"] == "sync"


@pytest.mark.gpu
def test_adamw_on_cuda_is_not_diagnosed_sync(tmp_path: Any) -> None:
    """A real gpt step with AdamW on CUDA: its counter reads are there, its syncs are not."""
    from autotune.workloads.gpt import GPTWorkload

    args = {k: v for k, v in GPT_TINY.items() if k != "_target_"}
    knobs = baseline_knobs(GPTWorkload(**args), "cuda")
    req = TrialRequest(workload=GPT_TINY, knobs=knobs, device="cuda", trace=True,
                       window={"warmup_steps": 3, "measure_steps": 10, "measure_seconds": 5.0,
                               "min_measure_steps": 3, "timeout_s": 180.0, "stall_s": 120.0,
                               "profile": True, "profile_steps": 2})
    res = run_window(req, tmp_path)
    assert res.outcome == "ok", f"{res.error}\n{res.stderr_tail}"
    assert res.trace["host_scalar_reads_per_step"] >= 2 * len(list(GPTWorkload(**args).model().parameters()))
    assert res.trace["syncs_per_step"] < 4, res.trace
    d = diagnose(dataclasses.asdict(res), knobs, "cuda", torch.cuda.get_device_properties(0).total_memory / 2**30)
    assert d["bottleneck"] != "sync", d
