"""Which finalist the confirmation's rounds support (pure: figures in, decision out).

Each finalist's speedup over the baseline comes from the rounds as paired ratios with a 95%
interval (results/intervals.py). Finalists sit in the same rounds, so two of them are compared
by their own paired ratio, which cancels the machine's drift that their intervals over the
baseline each carry (two overlapping intervals can still differ, paired). A finalist the
rounds show slower than the leader is dropped from further rounds (racing, as irace does:
rounds go to the configurations still in question). The finalists the rounds cannot show
slower than the leader, and whose estimate lies within the precision asked of the leader's,
tie with it: said in words, and broken toward a configuration whose speedup the data support,
then the one that changes fewer knobs from the user's own, then lower peak memory, never
toward the luckiest window. A finalist estimated further behind than the precision is not
tied even when its rounds cannot exclude a tie: preferring it for its fewer knobs would cost
more than the user said mattered (an idle run's tie of four went from 1.80x to 1.68x that
way). Where the tie-break would export another finalist than the leader while their paired
rounds show it neither slower nor within the precision of the leader, the two get more rounds
first (``unsettled``; search/confirmation/confirm.py). A speedup is exported only when its whole interval
lies above 1.0 (``decide``, which fills the confirmation's record; the numerics check calls it
again when it refuses the winner).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.results.intervals import MIN_ROUNDS, Interval, paired_speedup


@dataclass(frozen=True)
class Candidate:
    """One finalist as the choice sees it: its interval over the baseline, its own figure in
    each round (None: not measured or failed that round), and what a tie is broken on."""

    number: int
    interval: Interval
    changed: int  # knobs that differ from the baseline's
    peak_memory_gb: float
    runs: tuple[float | None, ...] = ()


def versus(a: Candidate, b: Candidate) -> Interval:
    """``a``'s speedup over ``b`` from the rounds that measured both: the two sat in the same
    rounds, so their own paired ratio cancels the machine's drift that their intervals over
    the baseline each carry (two overlapping intervals can still differ, paired)."""
    return paired_speedup(list(a.runs), list(b.runs))


def _behind(lead: Candidate, c: Candidate) -> bool:
    """``c`` is shown slower than ``lead``: paired (rounds with both), else by intervals over
    the baseline lying apart."""
    if c is lead:
        return False
    pair = versus(lead, c)
    if pair.known:
        return pair.above(1.0)
    return lead.interval.known and c.interval.known and c.interval.high < lead.interval.low


def interval_of(runs: Sequence[float | None], base: Sequence[float | None],
                contended: Sequence[bool] = ()) -> Interval:
    """The speedup over the rounds where both were measured. Rounds with a contended window
    on either side are left out while at least MIN_ROUNDS quiet ones remain (contention hits
    one side of a pair, not both: the ratio is then the machine's, not the configuration's)."""
    pairs = [(c, b, bool(contended[i]) if i < len(contended) else False)
             for i, (c, b) in enumerate(zip(runs, base, strict=False)) if c and b]
    quiet = [(c, b) for c, b, busy in pairs if not busy]
    use = quiet if len(quiet) >= MIN_ROUNDS else [(c, b) for c, b, _ in pairs]
    return paired_speedup([c for c, _ in use], [b for _, b in use])


def changed_knobs(knobs: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in knobs.items() if baseline.get(k) != v)


def still_racing(cands: Sequence[Candidate]) -> list[Candidate]:
    """The candidates not shown slower than the leader: the others are settled below it."""
    if not cands:
        return []
    lead = max(cands, key=lambda c: c.interval.point)
    return [c for c in cands if not _behind(lead, c)]


def racing(cands: Sequence[Candidate], same: Collection[int]) -> list[Candidate]:
    """The candidates still in question for either answer: those not shown slower than the
    leader, and among the ``same``-training ones those not shown slower than their own
    leader, whose interval the same-training answer needs though the overall leader is
    faster."""
    kept = {c.number for c in still_racing(cands)}
    kept |= {c.number for c in still_racing([c for c in cands if c.number in same])}
    return [c for c in cands if c.number in kept]


def precise(cands: Sequence[Candidate], precision: float) -> bool:
    """Every candidate still in question is known to +-precision."""
    return all(c.interval.half_width <= precision for c in cands)


def _within(lead: Candidate, c: Candidate, precision: float) -> bool:
    """``c``'s estimate is within ``precision`` of the leader's: paired where the rounds
    allow, else the ratio of their estimates over the baseline."""
    pair = versus(lead, c)
    ratio = pair.point if pair.known else lead.interval.point / max(c.interval.point, 1e-12)
    return ratio <= 1.0 + precision


def pick(cands: Sequence[Candidate], precision: float = 0.05
         ) -> tuple[Candidate, list[Candidate]]:
    """The winner and the candidates it tied with. The leader is the highest point estimate;
    the tie is every candidate the rounds cannot show slower than the leader (their paired
    ratio's 95% interval includes 1.0) whose estimate is within ``precision`` (the study's
    confirm_precision) of the leader's; within it, one whose speedup the data support
    (interval above 1.0) before one they do not, then fewer changed knobs, then lower peak
    memory, then the higher point."""
    lead = max(cands, key=lambda c: c.interval.point)
    if not lead.interval.known:
        return lead, []
    tied = [c for c in cands if c is lead
            or (not _behind(lead, c) and _within(lead, c, precision))]
    winner = min(tied, key=lambda c: (not c.interval.above(1.0), c.changed, c.peak_memory_gb,
                                      -c.interval.point))
    return winner, [c for c in tied if c is not winner]


def unsettled(cands: Sequence[Candidate], precision: float) -> list[Candidate]:
    """The leader and the finalist the tie-break would export in its place, while their paired
    rounds show the second neither slower than the leader nor within ``precision`` of it:
    more rounds of the two can say which ([] when there is nothing to settle). Why: an idle
    run tied batch 64 with batch 128 (equal knob counts, 2.6% apart after 16 rounds) and
    exported batch 64 for its lower memory; side by side over 24 rounds it was 6% slower,
    more than the precision the user asked for."""
    if len(cands) < 2:
        return []
    winner, _ = pick(cands, precision)
    lead = max(cands, key=lambda c: c.interval.point)
    if winner is lead or not lead.interval.known:
        return []
    pair = versus(lead, winner)
    if pair.known and pair.high <= 1.0 + precision:
        return []  # shown within the precision of the leader: a tie in fact
    return [lead, winner]


def tie_words(winner: Candidate, others: Sequence[Candidate]) -> str | None:
    """The tie in words, for the summary and the report."""
    if not others:
        return None
    names = ", ".join(f"trial {c.number} ({c.interval.text()}, {c.changed} knob(s) changed)"
                      for c in others)
    return (f"trial {winner.number} ({winner.interval.text()}, {winner.changed} knob(s) "
            f"changed) ties with {names}: their paired rounds cannot tell them apart and their "
            "estimates lie within the precision asked, so the data cannot rank them; the tie "
            "goes to a speedup the data support, then to the configuration that changes fewer "
            "knobs from yours, then to lower peak memory")


def window_noise(runs: Mapping[Any, Sequence[float | None]]) -> float:
    """How much windows of one configuration differ: the median over configurations of their
    coefficient of variation (standard deviation / mean; pyperf warns above 10%)."""
    cvs = [cv([v for v in vals if v]) for vals in runs.values()]
    cvs = [c for c in cvs if c > 0]
    return statistics.median(cvs) if cvs else 0.0


def cv(values: Sequence[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) >= 2 else 0.0


def decide(record: dict[str, Any], settled: list[Candidate], precision: float) -> dict[str, Any]:
    """Fill in the choice among ``settled`` (the candidates still in question): the winner,
    its figures and interval. Also how the numerics check re-picks when it refuses the
    winner (search/checks/numerics.py)."""
    for key in ("best_trial", "leader", "established", "precise", "tie", "best_runs",
                "best_samples_per_sec", "speedup", "speedup_ci", "speedup_text"):
        record.pop(key, None)
    if not settled:
        return record
    winner, tied = pick(settled, precision)
    base = int(record["baseline_trial"])
    runs = record["runs"]
    b_runs = [v for v in runs[str(base)] if v]
    w_runs = [v for v in runs[str(winner.number)] if v]
    iv = winner.interval
    established = iv.above(1.0) if iv.known else None
    # A speedup whose interval includes 1.0 is not a speedup: the user's own configuration
    # stays (results/trust.py says so when the machine was to blame); with fewer than 3 rounds
    # (study.confirm_runs) there is no interval and the winner stands on its point figure,
    # marked so.
    # ...unless it does not fit the memory limit: then the fastest finalist that fits is
    # exported, at whatever speed it has against it.
    fits = record.get("baseline_fits") is not False
    chosen = winner.number if established is not False or not fits else base
    c_runs = w_runs if chosen == winner.number else b_runs
    record.update({
        "best_trial": chosen,
        "leader": winner.number,
        "established": established,
        "precise": precise(settled, precision),
        "tie": tie_words(winner, tied),
        "best_runs": [round(v, 3) for v in c_runs],
        "baseline_runs": [round(v, 3) for v in b_runs],
        "best_samples_per_sec": round(statistics.median(c_runs), 3) if c_runs else None,
        "baseline_samples_per_sec": round(statistics.median(b_runs), 3) if b_runs else None,
        "speedup": round(iv.point, 3) if chosen == winner.number else 1.0,
        "speedup_ci": [round(iv.low, 3), round(iv.high, 3)] if iv.known else None,
        "speedup_text": iv.text(),
    })
    return record


#: What one answer is, in the confirmation's record: the choice ``decide`` fills in.
ANSWER_KEYS = ("best_trial", "leader", "established", "precise", "tie", "best_runs",
               "baseline_runs", "best_samples_per_sec", "baseline_samples_per_sec", "speedup",
               "speedup_ci", "speedup_text")


def decide_same(record: dict[str, Any], settled: Sequence[Candidate], same: Collection[int],
                precision: float) -> dict[str, Any]:
    """Fill in the same-training answer (``record["same_training"]``): the choice among the
    ``settled`` candidates that train the same model as the baseline (``same``), with its own
    interval. Where the overall choice already trains the same model (or is the baseline), it
    is that choice, said once (``same_as_best``)."""
    numbers = {int(n) for n in same}
    base = int(record["baseline_trial"])
    if "best_trial" in record and int(record["best_trial"]) in numbers | {base}:
        answer = {k: record[k] for k in ANSWER_KEYS if k in record}
        record["same_training"] = {"finalists": sorted(numbers), "same_as_best": True, **answer}
        return record
    sub = decide({"baseline_trial": base, "runs": record.get("runs") or {}},
                 [c for c in settled if c.number in numbers], precision)
    answer = {k: sub[k] for k in ANSWER_KEYS if k in sub}
    record["same_training"] = {"finalists": sorted(numbers), "same_as_best": False, **answer}
    return record


def candidates_of(record: dict[str, Any], exclude: Collection[int] = ()) -> list[Candidate]:
    """The record's candidates (their intervals and tie-break figures), less ``exclude``."""
    out = []
    for n, d in (record.get("intervals") or {}).items():
        if int(n) in exclude:
            continue
        iv = Interval(float(d["speedup"]), float(d["ci_low"] if d["ci_low"] is not None else 0.0),
                      float(d["ci_high"]) if d["ci_high"] is not None else float("inf"),
                      int(d["rounds"]))
        out.append(Candidate(int(n), iv, int(d.get("changed") or 0),
                             float(d.get("peak_memory_gb") or 0.0),
                             tuple((record.get("runs") or {}).get(str(n)) or ())))
    return out
