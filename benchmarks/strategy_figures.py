"""The strategy benchmark's figures, as pure functions over recorded trials (no torch, no
Optuna), so each can be tested on small real data: fraction of the oracle, trials and wall
time until within 5% of it, the share of time spent in pruned and failed trials, Kendall's
tau between two rankings, and a window's noise."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# torch.utils.benchmark warns when a measurement's IQR is this large a share of its median.
NOISE_FLAG = 0.10
WITHIN = 0.95  # "within 5% of the oracle"


def config_key(knobs: Mapping[str, Any]) -> str:
    return json.dumps(dict(knobs), sort_keys=True, default=str)


@dataclass
class Rec:
    """One trial of a strategy run: its configuration, its search figure (None unless it
    completed cleanly within the memory limit), the seconds it was charged, and its state
    (``ok``, ``pruned`` or ``failed``). A last record in state ``confirm`` is not a trial:
    autotune's confirmation after the search, charged its windows' seconds, whose winner
    (``key``) becomes the configuration exported."""

    key: str
    value: float | None
    seconds: float
    state: str


def incumbent_scores(recs: Sequence[Rec], truth: Mapping[str, float]) -> list[float]:
    """After each trial, the true figure of the configuration the strategy would export then
    (its fastest by search figure so far): its median over all the oracle's measurements when
    known, else its search figure. 0 before any trial completes. Scoring by the true figure
    stops a lucky window from counting as reaching the oracle."""
    out, best_value, best_key = [], None, None
    for r in recs:
        if r.state == "confirm":
            best_value, best_key = math.inf, r.key
        elif r.state == "ok" and r.value is not None and (best_value is None or r.value > best_value):
            best_value, best_key = r.value, r.key
        out.append(0.0 if best_key is None else truth.get(best_key, best_value or 0.0))
    return out


def trials_to(scores: Sequence[float], target: float,
              recs: Sequence[Rec] | None = None) -> int | None:
    """1-based trial count at which the score first reaches ``target`` (None: never); with
    ``recs``, a confirmation counts as no trial (reached there = reached after the last)."""
    n = 0
    for i, s in enumerate(scores):
        if recs is None or recs[i].state != "confirm":
            n += 1
        if s >= target:
            return max(n, 1)
    return None


def seconds_to(recs: Sequence[Rec], scores: Sequence[float], target: float) -> float | None:
    """Charged seconds, summed to the end of the record where the score first reaches target."""
    for i, s in enumerate(scores):
        if s >= target:
            return sum(r.seconds for r in recs[:i + 1])
    return None


def wasted_share(recs: Sequence[Rec]) -> float:
    """The share of the charged time spent in trials that were pruned or failed."""
    total = sum(r.seconds for r in recs)
    lost = sum(r.seconds for r in recs if r.state in ("pruned", "failed"))
    return lost / total if total > 0 else 0.0


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b between two scorings of the same items (ties counted as in scipy's
    default): 1 = same order, -1 = reversed."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"need two scorings of the same >= 2 items, got {len(a)} and {len(b)}")
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denom = ((concordant + discordant + ties_a) * (concordant + discordant + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else 0.0


def noise(step_ms: Mapping[str, float] | None) -> float | None:
    """A window's noise: the interquartile range of its step times over their median."""
    if not step_ms or not all(step_ms.get(k) for k in ("p25", "p75", "median")):
        return None
    return (float(step_ms["p75"]) - float(step_ms["p25"])) / float(step_ms["median"])


def noisy(step_ms: Mapping[str, float] | None) -> bool:
    n = noise(step_ms)
    return n is not None and n > NOISE_FLAG


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median over every seed, a seed that never got there counted as never (infinity): over
    only the seeds that got there, 2 lucky seeds of 5 would read as a median."""
    if not values:
        return None
    m = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(m) else m


def summarize(runs: Sequence[Sequence[Rec]], truth: Mapping[str, float],
              oracle: float) -> dict[str, Any]:
    """One strategy over its seeds: the median final fraction of the oracle (and the worst),
    median trials and seconds to within 5% over all seeds (never when most never got there), how
    many never did,
    the median total seconds and share of time in pruned and failed trials."""
    target = WITHIN * oracle
    finals, n_to, s_to, totals, wasted = [], [], [], [], []
    for recs in runs:
        scores = incumbent_scores(recs, truth)
        finals.append((scores[-1] if scores else 0.0) / oracle)
        n_to.append(trials_to(scores, target, recs))
        s_to.append(seconds_to(recs, scores, target))
        totals.append(sum(r.seconds for r in recs))
        wasted.append(wasted_share(recs))
    return {
        "seeds": len(runs),
        "trials": max((sum(r.state != "confirm" for r in recs) for recs in runs), default=0),
        "fraction": statistics.median(finals) if finals else 0.0,
        "fraction_min": min(finals, default=0.0),
        "trials_to_5pct": median_or_none(n_to),
        "seconds_to_5pct": median_or_none(s_to),
        "never": sum(n is None for n in n_to),
        "total_s": statistics.median(totals) if totals else 0.0,
        "wasted_share": statistics.median(wasted) if wasted else 0.0,
    }


def curves(runs: Sequence[Sequence[Rec]], truth: Mapping[str, float], oracle: float,
           points: int = 60) -> tuple[list[float], list[tuple[float, float]]]:
    """The median over seeds of the incumbent's fraction of the oracle, after each trial and
    along charged wall time (``points`` even steps to the longest run's end)."""
    per_seed = [[s / oracle for s in incumbent_scores(r, truth)] for r in runs]
    # By trial, a confirmation is no trial of its own: its winner is what the last trial exports.
    per_trial = [[s for s, r in zip(scores, recs, strict=True) if r.state != "confirm"]
                 for scores, recs in zip(per_seed, runs, strict=True)]
    for scores, recs, trials in zip(per_seed, runs, per_trial, strict=True):
        if recs and recs[-1].state == "confirm" and trials:
            trials[-1] = scores[-1]
    n = max((len(s) for s in per_trial), default=0)
    by_trial = [statistics.median([s[min(i, len(s) - 1)] for s in per_trial if s])
                for i in range(n)]
    end = max((sum(r.seconds for r in recs) for recs in runs), default=0.0)
    by_time: list[tuple[float, float]] = []
    for k in range(points + 1):
        t = end * k / points
        vals = []
        for recs, fr in zip(runs, per_seed, strict=True):
            elapsed, v = 0.0, 0.0
            for r, f in zip(recs, fr, strict=True):
                elapsed += r.seconds
                if elapsed > t:
                    break
                v = f
            vals.append(v)
        by_time.append((t, statistics.median(vals) if vals else 0.0))
    return by_trial, by_time
