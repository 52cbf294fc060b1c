"""WindowResult: the plain-data contract between a trial's child process and the driver."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# ok: measured. The others end a trial with a reason and never stop the study.
OUTCOMES = ("ok", "oom", "timeout", "stalled", "crash", "nan", "pruned", "compile_fallback",
            "capture_failed", "interrupted", "driver_lost")


@dataclass
class WindowResult:
    outcome: str = "crash"
    samples_per_sec: float = 0.0
    step_ms: dict[str, float] = field(default_factory=dict)  # median, p10, p90, mean
    steps: int = 0
    samples: int = 0
    measure_s: float = 0.0
    peak_memory_gb: float = 0.0
    compile_s: float = 0.0  # first warm-up step minus a steady step: compile/autotune cost
    # torch.compile's FX graph cache in the first step: {"hits": n, "misses": n} (compiled
    # trials only); hits without misses = a warm compile from the study's shared cache.
    compile_cache: dict[str, int] = field(default_factory=dict)
    warmup_s: float = 0.0
    final_loss: float | None = None
    # Share of the measured step spent in each phase (see window.py for how each is timed).
    timers: dict[str, float | None] = field(default_factory=dict)  # None: not measured
    trace: dict[str, Any] = field(default_factory=dict)  # profiler summary (diagnosis input)
    chunks: list[float] = field(default_factory=list)  # samples/sec so far, at each chunk edge
    # Seed 003's mock components, samples/sec: "loader" (input pipeline alone), "compute" (the
    # step alone on one cached device batch). Only those the driver asked for (not cached).
    ceilings: dict[str, float] = field(default_factory=dict)
    # Each measured ceiling's noise: the relative spread of its rate within its measurement.
    ceiling_noise: dict[str, float] = field(default_factory=dict)
    error: str = ""  # one line; the full stderr tail is kept by the runner
    notes: list[str] = field(default_factory=list)
    # A numerics request (numerics.py): the first N optimizer steps' losses.
    losses: list[float] = field(default_factory=list)
    # Filled by the runner (parent side):
    wall_s: float = 0.0
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_json(self) -> str:
        return json.dumps(_finite(asdict(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WindowResult:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, path: Path) -> WindowResult:
        return cls.from_dict(json.loads(path.read_text()))


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: store them as strings so the record survives (and says so)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
