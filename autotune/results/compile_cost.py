"""What torch.compile costs against what it buys, over the user's run.

A compiled configuration pays its compile time once (minutes for max-autotune on a GPU) and
then trains faster. Whether it wins depends on how long the run is:

- ``effective_rate``: with ``study.run_steps`` set (the user's run length in steps), the
  objective is the whole run's throughput, ``run_steps * batch / (compile + run_steps * batch /
  samples_per_sec)``, so a mode that compiles for minutes wins only where the run repays it;
- ``break_even``: for a compiled finalist, the training steps after which its compile time is
  paid back against the best eager configuration (best.yaml's ``compile`` section);
- the inductor cache: every trial of a study shares one ``TORCHINDUCTOR_CACHE_DIR`` under the
  study's directory (torch's FX graph cache is on by default), so a configuration compiled once
  compiles warm in a later trial or a confirmation run; each trial records its cache hits and
  misses, and the summary reports cold and warm compile times apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from autotune.core.tokens import TOKENS, unit_of
from autotune.results.record import TrialAttrs, trial_attrs
from autotune.results.trials import measured, rate

CACHE_DIR = "inductor_cache"


def cache_env(out_dir: Path) -> dict[str, str]:
    """The trial environment that shares the inductor's compiled artifacts across trials."""
    return {"TORCHINDUCTOR_CACHE_DIR": str((out_dir / CACHE_DIR).resolve())}


def compiled(knobs: Mapping[str, Any]) -> bool:
    return knobs.get("compile", "off") not in ("off", None, False)


def effective_rate(rate: float, compile_s: float, per_step: float,
                   run_steps: int | None) -> float:
    """The throughput over a whole run of ``run_steps`` steps, compile included (None: the
    steady-state rate itself). ``rate`` and ``per_step`` are in one unit: samples (the
    batch) or real tokens (a step's mean)."""
    if not run_steps or rate <= 0:
        return rate
    units = run_steps * per_step
    return units / (max(compile_s, 0.0) + units / rate)


def break_even(rate: float, compile_s: float, batch_size: float, eager_rate: float,
               eager_compile_s: float = 0.0) -> int | None:
    """Training steps (of this configuration's batch) until its extra compile time is paid back
    by its faster steps against the eager configuration; None if it is not faster."""
    if rate <= eager_rate or eager_rate <= 0:
        return None
    saved_per_step = batch_size / eager_rate - batch_size / rate
    return max(0, round(max(compile_s - eager_compile_s, 0.0) / saved_per_step))


def per_step(attrs: TrialAttrs) -> float:
    """A trial's units per step: its batch in samples, or its mean step's real tokens (the
    rate times the mean step) where it counted tokens."""
    if unit_of(attrs.get("unit")) == TOKENS:
        return rate(attrs) * float((attrs.get("step_ms") or {}).get("mean") or 0.0) / 1e3
    return float((attrs.get("knobs") or {}).get("batch_size") or 0)


def _complete(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """Measured trials that ran their own window (a twin's figures are its original's)."""
    return [t for t in trials if measured(t) and "duplicate_of" not in trial_attrs(t)]


def compile_summary(trials: list[FrozenTrial], finalists: list[FrozenTrial],
                    run_steps: int | None = None) -> dict[str, Any] | None:
    """best.yaml's ``compile`` section: cold and warm compile times of the compiled trials,
    and each compiled finalist's break-even against the best eager trial. None when no trial
    compiled."""
    done = _complete(trials)
    measured = [t for t in trials if compiled(trial_attrs(t).get("knobs") or {})
                and trial_attrs(t).get("compile_s") is not None]
    if not measured:
        return None
    cold = [float(trial_attrs(t)["compile_s"]) for t in measured
            if (trial_attrs(t).get("compile_cache") or {}).get("misses")]
    warm = [float(trial_attrs(t)["compile_s"]) for t in measured
            if (c := trial_attrs(t).get("compile_cache") or {}).get("hits") and not c.get("misses")]
    eager = max((t for t in done if not compiled(trial_attrs(t)["knobs"])),
                key=lambda t: rate(trial_attrs(t)), default=None)
    out: dict[str, Any] = {
        "unit": unit_of(trial_attrs(measured[0]).get("unit")),  # of the rates below
        "run_steps": run_steps,
        "compiled_trials": len(measured),
        "compile_s_cold_median": round(statistics.median(cold), 2) if cold else None,
        "compile_s_warm_median": round(statistics.median(warm), 2) if warm else None,
        "cold_trials": len(cold), "warm_trials": len(warm),
        "best_eager": ({"trial": eager.number,
                        "rate": round(rate(trial_attrs(eager)), 2)}
                       if eager else None),
        "finalists": [],
    }
    for t in finalists:
        knobs = trial_attrs(t).get("knobs") or {}
        if not compiled(knobs):
            continue
        fast, comp = rate(trial_attrs(t)), float(trial_attrs(t).get("compile_s") or 0)
        out["finalists"].append({
            "trial": t.number, "compile": knobs.get("compile"), "compile_s": round(comp, 2),
            "rate": round(fast, 2),
            "break_even_steps": break_even(fast, comp, per_step(trial_attrs(t)),
                                           rate(trial_attrs(eager)),
                                           float(trial_attrs(eager).get("compile_s") or 0))
            if eager else None,
        })
    return out


def summary_lines(section: Mapping[str, Any] | None) -> list[str]:
    """The compile section in words, for the end-of-study summary."""
    if not section:
        return []
    lines = [f"compile: {section['compiled_trials']} compiled trial(s); cold compile median "
             f"{section['compile_s_cold_median']} s, warm (inductor cache) "
             f"{section['compile_s_warm_median']} s"
             + (f"; the objective is {section.get('unit') or 'samples/s'} over a run of "
                f"{section['run_steps']:,} steps, compile included (study.run_steps)"
                if section.get("run_steps") else "")]
    for f in section["finalists"]:
        steps = f["break_even_steps"]
        paid = (f"pays back its {f['compile_s']} s compile after {steps:,} steps against the best "
                "eager configuration") if steps is not None else "is not faster than the best eager configuration"
        lines.append(f"  trial {f['trial']} (compile={f['compile']}) {paid}")
    return lines
