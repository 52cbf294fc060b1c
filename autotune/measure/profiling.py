"""CHILD side: a short torch.profiler capture after the measured window, and its summary.

``capture(run, batches, steps, trace_path)`` profiles ``steps`` training steps (after one
warm-up step the profiler discards), writes the Chrome trace to ``trace_path`` and returns
``summarize_trace(trace, steps)``: a plain, JSON-serialisable dict of per-step numbers that the
parent's diagnosis (``autotune/diagnose/verdicts.py``) reads. The capture never fails a trial: any error
comes back as ``{"error": "..."}``.

The summary itself (its fields, pure functions over the trace) is autotune/diagnose/trace_summary.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from autotune.diagnose.trace_summary import is_low_precision_kernel, summarize_trace

__all__ = ["capture", "is_low_precision_kernel", "summarize_trace"]


# --- the capture (child side) ---------------------------------------------------------------
def capture(run: Any, batches: Iterator[Any], steps: int, trace_path: str,
            beat: Callable[[int], None] = lambda step: None) -> dict[str, Any]:
    """Profile ``steps`` training steps of ``run`` (an ``autotune.core.training.Training``) fed from
    ``batches``; write the Chrome trace to ``trace_path``; return its summary. ``beat`` after
    each step tells the trial's watchdog that a slow step (a loaded machine) is not a hang.

    Never raises: a failed capture returns ``{"error": "<type>: <message>"}`` so the measured
    window still counts."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function, schedule

        steps = max(1, int(steps))
        activities = [ProfilerActivity.CPU]
        if torch.device(run.device).type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        path = Path(trace_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        written: list[str] = []

        def on_ready(prof: Any) -> None:
            prof.export_chrome_trace(str(path))
            written.append(str(path))

        with profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
            on_trace_ready=on_ready,
            profile_memory=True,
            record_shapes=False,
        ) as prof:
            for i in range(1 + steps):  # one warm-up step, then the active ones
                with record_function("data"):
                    inputs, targets = next(batches)
                run.step(*run.to_device(inputs, targets))
                if i == 0 and torch.device(run.device).type == "cuda":
                    # The warm-up step's kernels must not spill into the recorded steps.
                    torch.cuda.synchronize(run.device)
                prof.step()
                beat(i + 1)
        if not written:  # the schedule's cycle did not complete: export what there is
            prof.export_chrome_trace(str(path))
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
        summary = summarize_trace(trace, steps)
        summary["trace_path"] = str(path)
        return summary
    except Exception as exc:  # noqa: BLE001 - the summary is evidence; never fail the trial
        text = str(exc).strip().splitlines()
        return {"error": f"{type(exc).__name__}: {text[0] if text else ''}"[:500]}
