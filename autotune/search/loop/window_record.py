"""What a trial keeps of its window: the WindowResult (measure/protocol.py) as the trial's
stored attributes (results/record.TrialAttrs), read by the report, the exports and every later
worker, long after the window's process is gone."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.core.files import atomic_write
from autotune.measure.loader_profile import stored_profile
from autotune.measure.protocol import WindowResult
from autotune.results.record import TrialAttrs

#: The trace summary's lists kept out of its stored copy: top_kernels is stored as an
#: attribute of its own (the report's kernel table), top_cpu_ops not at all (the diagnosis has
#: read it from the WindowResult by then).
_TRACE_LISTS = ("top_kernels", "top_cpu_ops")


#: WindowResult's fields a trial does not store under their own name, and why: every other
#: field is a key of results/record.WindowAttrs (tests/test_record.py holds the three to it).
NOT_STORED = {
    "steps": "the window's steps and samples make its samples_per_sec and tokens_per_sec",
    "samples": "the window's steps and samples make its samples_per_sec and tokens_per_sec",
    "error": "stored after the outcome in reason",
    "losses": "a numerics run's (search/checks/numerics.py), not a trial's",
    "ceilings": "the driver's reading, merged with the study's cached ones (ReadingAttrs)",
    "ceiling_noise": "the driver's reading, merged with the study's cached ones (ReadingAttrs)",
}


def window_attrs(r: WindowResult, study_unit: str) -> TrialAttrs:
    """The trial's record of its window. A failed window keeps the study's unit (its own is
    the default) and its stderr's tail; an ok one drops the tail (it is noise there)."""
    attrs: TrialAttrs = {
        "outcome": r.outcome,
        "reason": "" if r.outcome == "ok" else f"{r.outcome}: {r.error}".strip(": "),
        "samples_per_sec": r.samples_per_sec,
        "unit": r.unit if r.ok else study_unit,
        "step_ms": r.step_ms,
        "peak_memory_gb": r.peak_memory_gb,
        "compile_s": r.compile_s,
        "compile_cache": r.compile_cache,
        "final_loss": r.final_loss,
        "timers": r.timers,
        "chunks": r.chunks,
        "wall_s": r.wall_s,
        "extras_s": r.extras_s,
        "warmup_s": r.warmup_s,
        "measure_s": r.measure_s,
        "contention": r.contention,
        "input_shapes": r.input_shapes,
        "comm": r.comm,
        "ranks": r.ranks,
        "trace": {k: v for k, v in r.trace.items() if k not in _TRACE_LISTS},
        "top_kernels": list(r.trace.get("top_kernels") or []),
        "optimizer": r.optimizer,
        "stderr_tail": r.stderr_tail[-2000:] if r.outcome != "ok" else "",
    }
    attrs.update(token_attrs(r))
    if r.loader_profile:
        attrs["loader_profile"] = stored_profile(r.loader_profile)
    if r.signal:
        attrs["signal"] = r.signal
    if r.exit_code is not None:
        attrs["exit_code"] = r.exit_code
    return attrs


def token_attrs(r: WindowResult) -> TrialAttrs:
    """What a trial records of its tokens ({} for a window without any)."""
    attrs: TrialAttrs = {}
    if r.tokens_computed:
        attrs.update({"tokens_per_sec": r.tokens_per_sec, "tokens": r.tokens,
                      "tokens_computed": r.tokens_computed, "padding_share": r.padding_share,
                      "padding_batches": r.padding_batches})
    if r.length_groups:
        attrs["length_groups"] = r.length_groups
    return attrs


def write_loader_profile(r: WindowResult, trial_dir: Path) -> None:
    """The whole loader profile beside the trial (the study keeps its summary): the report
    and the user read its stages and hot spots."""
    if r.loader_profile:
        atomic_write(trial_dir / "loader_profile.json", json.dumps(r.loader_profile, indent=1))
