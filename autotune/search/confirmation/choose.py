"""Which finalist the confirmation's rounds support (pure: figures in, decision out).

Each finalist's speedup over the baseline comes from the rounds as paired ratios with a 95%
interval (results/intervals.py), over the rounds that count (results/intervals.counted_rounds:
one rule, read by every comparison here). Finalists sit in the same rounds, so two of them are
compared by their own paired ratio, which cancels the machine's drift that their intervals
over the baseline each carry. Which of them the rounds still have to tell apart, which are
dropped and which lie within the user's indifference zone of each other is the selection's
(search/confirmation/selection.py: Kim and Nelson's fully sequential procedure). Among the
finalists left, those within the zone of the leader and of each other are one choice as far as
the user is concerned: it goes to a configuration whose speedup the data support, then to the
one that changes fewer knobs from the user's own, then to lower peak memory, never to the
luckiest window, and costs at most the zone (``pick``). Finalists the rounds left undecided
(the budget ended them first) are not tied: the faster measured is exported and the gap said
(``undecided_words``). A speedup is exported only when its whole interval lies above 1.0
(``decide``, which fills the confirmation's record; the numerics check calls it again when it
refuses the winner).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.results.intervals import Interval, compared, counted_rounds
from autotune.search.confirmation import selection
from autotune.search.confirmation.selection import Selection

if TYPE_CHECKING:
    from autotune.search.confirmation.rounds import Rounds


@dataclass(frozen=True)
class Candidate:
    """One finalist as the choice sees it: its interval over the baseline, its own figure in
    each round (None: not measured or failed that round) and whether that window ran beside
    other work, and what a tie is broken on."""

    number: int
    interval: Interval
    changed: int  # knobs that differ from the baseline's
    peak_memory_gb: float
    runs: tuple[float | None, ...] = ()
    busy: tuple[bool, ...] = ()


def versus(a: Candidate, b: Candidate) -> Interval:
    """``a``'s speedup over ``b`` from the rounds that measured both and count
    (intervals.counted_rounds: a contended round is left out, as from each one's interval over
    the baseline): the two sat in the same rounds, so their own paired ratio cancels the
    machine's drift that their intervals over the baseline each carry."""
    return compared(a.runs, b.runs, a.busy, b.busy)


def interval_of(runs: Sequence[float | None], base: Sequence[float | None],
                contended: Sequence[bool] = ()) -> Interval:
    """The speedup over the rounds that count (intervals.counted_rounds); ``contended``: a
    round with a contended window on either side."""
    return compared(runs, base, contended)


def counted(c: Candidate, base_runs: Sequence[float | None],
            base_busy: Sequence[bool] = ()) -> int:
    """How many rounds count in ``c``'s interval over the baseline."""
    return len(counted_rounds(c.runs, base_runs, c.busy, base_busy)[0])


def changed_knobs(knobs: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in knobs.items() if baseline.get(k) != v)


def _rule(sel: Selection | float | None, cands: Sequence[Candidate]) -> Selection:
    """The selection's terms; a bare float is an older record's precision, taken as its zone."""
    if isinstance(sel, Selection):
        return sel
    zone = 0.05 if sel is None else float(sel)
    return Selection(zone, 0.95, max(2, len(cands)))


def still_racing(cands: Sequence[Candidate], sel: Selection | float | None = None
                 ) -> list[Candidate]:
    """The candidates the selection has not dropped (selection.survivors)."""
    return selection.survivors(cands, _rule(sel, cands))


def racing(cands: Sequence[Candidate], same: Collection[int],
           sel: Selection | float | None = None) -> list[Candidate]:
    """The candidates still in question for either answer (selection.racing)."""
    return selection.racing(cands, same, _rule(sel, cands))


def precise(cands: Sequence[Candidate], precision: float) -> bool:
    """Every candidate given is known to +-precision."""
    return all(c.interval.half_width <= precision for c in cands)


def pick(cands: Sequence[Candidate], sel: Selection | float | None = None
         ) -> tuple[Candidate, list[Candidate]]:
    """The winner and the candidates it is chosen among. The leader is the highest point
    estimate; with it, every candidate the selection puts within the zone of it and of each
    one already taken (selection.verdict "within": the choice among them costs at most the
    zone); among those, one whose speedup the data support (interval above 1.0) before one
    they do not, then fewer changed knobs, then lower peak memory, then the higher point."""
    rule = _rule(sel, cands)
    lead = max(cands, key=lambda c: c.interval.point)
    if not lead.interval.known:
        return lead, []
    tied = [lead]
    for c in sorted(cands, key=lambda c: -c.interval.point):
        if c is not lead and all(selection.verdict(c, t, rule) == "within" for t in tied):
            tied.append(c)
    winner = min(tied, key=lambda c: (not c.interval.above(1.0), c.changed, c.peak_memory_gb,
                                      -c.interval.point))
    return winner, [c for c in tied if c is not winner]


def tie_words(winner: Candidate, others: Sequence[Candidate],
              zone: float | None = None) -> str | None:
    """The choice among finalists within the zone, in words, for the summary and the report:
    each one's paired ratio to the winner, never "cannot be told apart" (their intervals over
    the baseline may well be disjoint, on a quiet machine: they are within the zone all the
    same)."""
    if not others:
        return None
    names = ", ".join(f"trial {c.number} ({c.interval.text()}, {c.changed} knob(s) changed; "
                      f"{_paired_words(c, winner)})" for c in others)
    within = f"{100 * zone:.0f}%" if zone is not None else "the zone"
    return (f"trial {winner.number} ({winner.interval.text()}, {winner.changed} knob(s) "
            f"changed) is chosen among finalists within {within} of each other (study."
            f"indifference): {names}. A difference under the zone is not worth a choice, so "
            "it goes to a speedup the data support, then to the configuration that changes "
            "fewer knobs from yours, then to lower peak memory; it costs at most the zone")


def _paired_words(c: Candidate, ref: Candidate) -> str:
    iv = versus(c, ref)
    if not iv.known:
        return f"{iv.point:.2f}x trial {ref.number}, paired"
    return f"{iv.point:.2f}x trial {ref.number} paired, {iv.low:.2f}-{iv.high:.2f}"


def undecided_words(winner: Candidate, cands: Sequence[Candidate], tied: Sequence[Candidate],
                    base: int | None = None, sel: Selection | None = None) -> str | None:
    """Finalists the rounds ended before deciding (the budget or the round cap): not a tie;
    the faster measured is exported, and how far the others may be from it is said (the
    baseline, trial ``base``, as your configuration: its 1.00x is no measurement). Those whose
    paired interval lies wholly below the winner's by more than the zone (``sel``) are said apart,
    as behind it: the selection had not dropped them (its guarantee holds over every pair at
    once and needs more rounds), but a reader of one list took the README study's two
    same-training candidates, 0.71x and 0.78x the winner, for contenders beside finalists
    0-10% from it."""
    left = [c for c in cands if c is not winner and c not in tied]
    if not left:
        return None
    behind = [c for c in left if sel is not None and c.number != base
              and _behind_by_zone(c, winner, sel.zone)]
    close = [c for c in left if c not in behind]

    def named(group: Sequence[Candidate]) -> str:
        return "; ".join((f"your configuration, trial {c.number}" if c.number == base else
                          f"trial {c.number} {c.interval.text()}")
                         + f" ({_paired_words(c, winner)})" for c in group)

    tail = ("the fastest measured is exported, and the paired interval says how far the other "
            "may be from it (a larger study.confirm_budget_s or study.indifference decides)")
    slower = (f"read slower than trial {winner.number} by more than "
              f"{100 * (sel.zone if sel else 0):.0f}% (study.indifference) on the paired "
              "interval, not yet dropped by the selection (its guarantee holds over all "
              f"{sel.systems if sel else len(cands)} finalists at once)")
    if not close:
        return (f"the rounds ended before the selection dropped {named(behind)}, which "
                f"{slower}: trial {winner.number} ({winner.interval.text()}), the fastest "
                "measured, is exported")
    words = (f"the rounds ended before they decided between trial {winner.number} "
             f"({winner.interval.text()}) and {named(close)}")
    if behind:
        words += f"; {named(behind)} {slower}"
    return f"{words}: {tail}"


def _behind_by_zone(c: Candidate, winner: Candidate, zone: float) -> bool:
    """Whether ``c``'s paired interval against ``winner`` lies wholly below 1 / (1 + zone)."""
    iv = versus(c, winner)
    return iv.known and iv.high < 1.0 / (1.0 + zone)


def window_noise(runs: Mapping[Any, Sequence[float | None]]) -> float:
    """How much windows of one configuration differ: the median over configurations of their
    coefficient of variation (standard deviation / mean; pyperf warns above 10%)."""
    cvs = [cv([v for v in vals if v]) for vals in runs.values()]
    cvs = [c for c in cvs if c > 0]
    return statistics.median(cvs) if cvs else 0.0


def cv(values: Sequence[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) >= 2 else 0.0


def selection_of(record: Mapping[str, Any]) -> Selection:
    """The selection's terms a record was decided with (older records: their precision as the
    zone, their finalists as the systems)."""
    return _terms(record, None, candidates_of(dict(record)))


def _terms(record: Mapping[str, Any], sel: Selection | float | None,
           cands: Sequence[Candidate]) -> Selection:
    """``sel`` where given as terms, else the record's (a float beside a record that has its
    terms: an older caller's precision, which the record's own terms replace)."""
    if isinstance(sel, Selection):
        return sel
    if record.get("selection"):
        return Selection.from_dict(dict(record["selection"]))
    return _rule(sel if sel is not None else record.get("precision"), cands)


def decide(record: dict[str, Any], settled: list[Candidate],
           sel: Selection | float | None = None) -> dict[str, Any]:
    """Fill in the choice among ``settled`` (the candidates still in question): the winner,
    its figures and interval (``sel``: the selection's terms, else the record's). Also how
    the numerics check re-picks when it refuses the winner (search/checks/numerics.py)."""
    for key in ANSWER_KEYS:
        record.pop(key, None)
    if not settled:
        return record
    rule = _terms(record, sel, settled)
    settled = selection.survivors(settled, rule)
    winner, tied = pick(settled, rule)
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
    precision = record.get("precision")
    record.update({
        "best_trial": chosen,
        "leader": winner.number,
        "established": established,
        "decided": selection.resolved(settled, rule),
        "precise": precise([winner], float(precision)) if precision else None,
        "tie": tie_words(winner, tied, rule.zone),
        "undecided": undecided_words(winner, settled, tied, base, rule),
        "best_runs": [round(v, 3) for v in c_runs],
        "baseline_runs": [round(v, 3) for v in b_runs],
        "best_samples_per_sec": round(statistics.median(c_runs), 3) if c_runs else None,
        "baseline_samples_per_sec": round(statistics.median(b_runs), 3) if b_runs else None,
        "speedup": round(iv.point, 3) if chosen == winner.number else 1.0,
        "speedup_ci": [round(iv.low, 3), round(iv.high, 3)] if iv.known else None,
        "speedup_text": iv.text(),
        "half_width": round(iv.half_width, 4) if iv.known else None,
    })
    return record


#: What one answer is, in the confirmation's record: the choice ``decide`` fills in.
ANSWER_KEYS = ("best_trial", "leader", "established", "decided", "precise", "tie", "undecided",
               "best_runs", "baseline_runs", "best_samples_per_sec", "baseline_samples_per_sec",
               "speedup", "speedup_ci", "speedup_text", "half_width")


def decide_same(record: dict[str, Any], settled: Sequence[Candidate], same: Collection[int],
                sel: Selection | float | None = None) -> dict[str, Any]:
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
    subset = [c for c in settled if c.number in numbers]
    sub = decide({"baseline_trial": base, "runs": record.get("runs") or {},
                  "precision": record.get("precision")}, subset, _terms(record, sel, subset))
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
                             tuple((record.get("runs") or {}).get(str(n)) or ()),
                             tuple(bool(b) for b in
                                   (record.get("contended") or {}).get(str(n)) or ())))
    return out


def answers(settled: list[Candidate], same: Collection[int], sel: Selection) -> list[Candidate]:
    """The winner of each answer among ``settled`` (the same-training one where it differs)."""
    out = [pick(selection.survivors(settled, sel), sel)[0]] if settled else []
    own = [c for c in settled if c.number in same]
    if own:
        other = pick(selection.survivors(own, sel), sel)[0]
        out += [other] if other is not out[0] else []
    return out


def decided(cands: list[Candidate], same: Collection[int], sel: Selection,
            base: Candidate | None) -> bool:
    """Both answers resolved (selection.decided), and each answer's winner decided against
    the baseline too (ahead of it, within the zone of it, or behind): a study of one finalist
    is a choice between it and your own configuration."""
    if not selection.decided(cands, same, sel):
        return False
    return base is None or all(c.number == base.number or selection.verdict(c, base, sel)
                               for c in answers(cands, same, sel))


def answered_same(group: list[Candidate], same: Collection[int], sel: Selection,
                  base: Candidate | None, rounds: Rounds, runs: int) -> set[int]:
    """The same-training answer's candidates no further round needs while the other answer
    is still open: its own group resolved, its winner decided against the baseline, each of
    them measured in the least rounds, and none still in question among all the finalists.
    Before, racing kept such a lone survivor measured every round until the other answer
    decided: a README study's same-training finalist (bf16 at your batch) ran in all 6 of its
    rounds, where its answer was decided after 4 (2026-12-07)."""
    own = selection.survivors([c for c in group if c.number in same], sel)
    if not own or not selection.resolved(own, sel):
        return set()
    leader = pick(own, sel)[0]
    if base is not None and leader.number != base.number and \
            selection.verdict(leader, base, sel) is None:
        return set()
    if base is not None and any(rounds.paired(c.number, base.number) < runs for c in own):
        return set()
    return {c.number for c in own} - {c.number for c in selection.survivors(group, sel)}
