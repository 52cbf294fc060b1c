"""Whether the study could measure at all, and the words when it could not.

A study on a machine that stays busy still produces figures: they describe the machine's
moods, not the configurations. Confirmation runs until its intervals are precise or its
budget is spent (search/confirm.py); when it ends on the budget while most windows were
contended, or while windows of one configuration kept disagreeing, the study says so, names
the load it saw ("other processes used 1.7 of 2 cores during 9 of 12 windows"), exports only
what its intervals support (search/confirm.py keeps the user's configuration when the winner's
interval includes 1.0) and exits with search/run.py's COULD_NOT_MEASURE, so that a scheduler
can tell. Read from the stored study alone: best.yaml, the summary and the report say the same.
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from autotune.diagnose.thresholds import CONTENDED_WINDOWS_SHARE, NOISY_WINDOWS_CV
from autotune.results.intervals import MIN_ROUNDS
from autotune.results.record import study_attrs, trial_attrs
from autotune.results.trials import measured


def window_loads(study: optuna.Study) -> list[dict[str, Any]]:
    """Every measured window's load: the search's trials, then the confirmation's windows."""
    loads = [trial_attrs(t).get("contention") or {} for t in study.get_trials(deepcopy=False)
             if measured(t)]
    conf = study_attrs(study).get("confirmation") or {}
    return [*loads, *(conf.get("loads") or [])]


def load_statement(loads: list[dict[str, Any]]) -> str | None:
    """"other processes used 1.7 of 2 cores during 9 of 12 windows" (None: no window was
    contended)."""
    busy = [c for c in loads if c.get("contended")]
    if not busy:
        return None
    others = statistics.fmean(float(c.get("other_cpu_cores") or 0.0) for c in busy)
    cpus = max(int(c.get("cpus") or 0) for c in loads)
    waits = [float(c.get("runqueue_wait_share") or 0.0) for c in busy]
    words = (f"other processes used {others:.1f} of {cpus} cores during {len(busy)} of "
             f"{len(loads)} windows")
    if any(waits):
        words += (f", and the trial's threads waited for a core {statistics.fmean(waits):.0%} "
                  "of the time they were ready to run")
    extra = sorted({r for c in busy for r in c.get("reasons") or []
                    if not r.startswith("other processes")})
    return words + (f" ({'; '.join(extra)})" if extra else "")


def could_not_measure(study: optuna.Study) -> str | None:
    """The statement when the study could not measure (None: it could): its confirmation ended
    on its budget or round limit, not on its precision, while the machine was busy or the
    windows noisy beyond the thresholds (diagnose/thresholds.py)."""
    conf = study_attrs(study).get("confirmation") or {}
    if (not conf or conf.get("stopped") not in ("budget", "rounds") or conf.get("precise")
            or int(conf.get("rounds") or 0) < MIN_ROUNDS):
        return None  # precise; or too few rounds asked for (study.confirm_runs) to judge
    loads = window_loads(study)
    busy = sum(1 for c in loads if c.get("contended"))
    noisy = float(conf.get("window_noise") or 0.0) > NOISY_WINDOWS_CV
    crowded = bool(loads) and busy / len(loads) >= CONTENDED_WINDOWS_SHARE
    if not (noisy or crowded):
        return None
    parts = []
    if crowded:
        parts.append(load_statement(loads) or "")
    if noisy:
        parts.append(f"windows of one configuration differed by {conf['window_noise']:.0%} "
                     f"(coefficient of variation; above {NOISY_WINDOWS_CV:.0%} no ranking holds)")
    verdict = ("the speedup above is supported by its interval"
               if conf.get("established") else
               "no speedup is exported: the confirmed interval does not exclude 1.0, so your "
               "own configuration stays")
    return (f"this machine was too busy to measure: {'; '.join(p for p in parts if p)}. "
            f"Confirmation spent its budget ({conf.get('spent_s')} of "
            f"study.confirm_budget_s={conf.get('budget_s')}s, {conf.get('rounds')} rounds) "
            f"without reaching +-{100 * float(conf.get('precision') or 0):.0f}%; {verdict}. "
            "Run the study again on a quiet machine (or raise study.confirm_budget_s) to rank "
            "the configurations.")
