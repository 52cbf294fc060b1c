"""Re-measuring the finalists: randomized interleaved rounds until the speedups are sure.

The best of N noisy trials is biased upward (it won partly by luck), and a baseline measured
once at the start is exposed to whatever the machine was doing then. So after the search the
``top`` fastest distinct configurations and the baseline are measured again in rounds: each
round runs every one of them once, in a random order (Abedi and Brecht, ICPE 2017: randomized
multiple interleaved trials; a fixed order lets a periodic load or a warming machine favour
one position). Each finalist's speedup is the geometric mean of its per-round ratios over the
baseline, with a 95% interval (results/intervals.py). Rounds go on, at least ``runs`` of them,
until every finalist still in question is known to ``setup.study.confirm_precision`` or
``setup.study.confirm_budget_s`` is spent; a finalist whose interval falls wholly below the leader's
stops being measured. The choice among those left is search/confirmation/choose.py's; where its tie-break
would export another finalist than the leader before their paired rounds settle which is
faster (choose.unsettled), the two and the baseline get more rounds, up to TIE_BUDGET_SHARE
of the budget again.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.measure.protocol import WindowResult
from autotune.measure.runner import run_window
from autotune.results.intervals import MIN_ROUNDS, Interval, t975
from autotune.results.record import set_study_attrs, trial_attrs
from autotune.results.trials import (
    baseline_trial,
    best_trial,
    changes_training,
    finalists,
    over_limit,
    same_training_finalists,
)
from autotune.results.trials import window_noise as search_noise
from autotune.search.confirmation.choose import (
    Candidate,
    changed_knobs,
    cv,
    decide,
    decide_same,
    interval_of,
    pick,
    precise,
    racing,
    unsettled,
    window_noise,
)
from autotune.search.confirmation.rounds import (
    Rounds,
    compact_load,
    expected_round_s,
    load_summary,
    raced,
    run_round,
)
from autotune.search.confirmation.words import (
    MAX_ROUNDS,
    busy_words,
    progress_words,
    race_words,
    round_words,
)
from autotune.search.round_spread import expected_rounds
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")

#: Before this many rounds a narrow interval does not end the confirmation (the budget still
#: may): four rounds of the README's CPU study once agreed to +-3% by chance (2.19x, 95% CI
#: 2.12-2.25x, with windows 6-11% noisy) and the configuration re-measured alone read 2.07x.
#: A t interval over 3 degrees of freedom trusts four lucky rounds; six are the floor, for
#: dropping a finalist (racing) as for stopping. The floor comes down where the windows
#: themselves are quiet (trusted_rounds): on one H100 (2026-11-26) the README's study's
#: finalists' windows varied by 0.4-0.7% and their rounds by 1%, where a 2-core VM's varied by
#: 6-11%.
PRECISE_ROUNDS = 6
#: A tie that the tie-break would decide against the leader, unsettled when the rounds end,
#: gets rounds of the two and the baseline alone for up to this share of
#: study.confirm_budget_s again: an idle run's batch-64 export tied with batch 128 after 16
#: rounds (2.6% apart, to lower memory) and read 6% slower over 24 side by side.
TIE_BUDGET_SHARE = 0.5


def eliminate(cands: list[Candidate], same: Collection[int], floor: int) -> list[Candidate]:
    """The candidates still in question: racing (choose.racing) among those with at least
    ``floor`` rounds, where it is trusted; one with fewer is kept until it has them (a
    contender that joined late, or one whose windows failed)."""
    ready = [c for c in cands if c.interval.rounds >= floor]
    kept = {c.number for c in racing(ready, same)} | {c.number for c in cands
                                                       if c.interval.rounds < floor}
    return [c for c in cands if c.number in kept]


def confirm(setup: StudySetup, study: optuna.Study, runs: int, top: int = 1,
            stop: StopFlag | None = None,
            run: Callable[..., WindowResult] = run_window) -> dict[str, Any] | None:
    """Measure the finalists and the baseline in rounds; record and return the confirmation
    (``run``: how a window is measured; the strategy benchmark serves stored windows)."""
    base = baseline_trial(study)
    finals = finalists(study, max(1, top))
    if runs < 1 or not finals or base is None:
        return None
    # The same-training answer's candidates sit in the same rounds (study.training).
    finals += same_training_finalists(study, finals)
    same = {t.number for t in finals if not changes_training(study, t, base)}
    if only_baseline(finals, base):
        # A study of one trial, or one whose other trials all failed or were pruned: rounds of
        # the baseline against itself read 1.00x (a 1-trial README study spent 80 s on them).
        log.info("no confirmation: the baseline (trial %d) is the only finalist, so there is "
                 "nothing to compare it with", base.number)
        return None
    trials = {t.number: t for t in [*finals, base]}
    rounds, dropped = raced(study)  # the rounds the search's race ran, if it raced
    rounds = rounds.only(trials)
    race_rounds = len(rounds.order)
    for n in trials:
        rounds.join(n)
    active = [t.number for t in finals if t.number not in dropped] or [t.number for t in finals]
    rng = random.Random(f"{study.study_name}-{setup.seed}")
    noise = max_noise(trials.values(), rounds)
    floor = trusted_rounds(noise, setup.study.confirm_precision)
    round_s = expected_round_s(trials.values())
    _announce(setup, base.number, active, same, runs, floor, noise, round_s)
    said: set[str] = set()  # what the rounds' lines have explained once (words.py)
    race_s = sum(rounds.seconds)
    why = None
    settled = candidates(trials, rounds, active, base)
    if rounds.order:  # the search raced: its rounds count, and may already be enough
        log.info("  %s", race_words(race_rounds, race_s, settled, dropped, base.number))
    if rounds.order and all(rounds.paired(n, base.number) for n in active if n != base.number):
        floor = trusted_rounds(max_noise(trials.values(), rounds), setup.study.confirm_precision)
        settled = eliminate(settled, same, floor)
        active = [c.number for c in settled]
        why = _stop_reason(setup, rounds, settled, runs, race_s, floor, base.number)
    while not why:
        order = [n for n in trials if n in active or n == base.number]
        rng.shuffle(order)
        run_round(setup, trials, order, rounds, stop, run)
        cands = candidates(trials, rounds, active, base)
        # Racing drops a finalist on the same evidence a precision stop needs: after 3
        # rounds it once dropped two batch-64 finalists (1.79x, 1.88x) beside a batch-128
        # winner at 2.03x, where the run before had confirmed batch 64 at 2.00-2.09x over 10
        # rounds: dropped that early, a finalist never reaches the tie rule.
        floor = trusted_rounds(max_noise(trials.values(), rounds), setup.study.confirm_precision)
        settled = eliminate(cands, same, floor)
        active = [c.number for c in settled]
        why = _stop_reason(setup, rounds, settled, runs, sum(rounds.seconds), floor, base.number)
        log.info("  %s", progress_words(len(rounds.order), settled, floor,
                                        setup.study.confirm_precision, sum(rounds.seconds),
                                        setup.study.confirm_budget_s, base.number, said,
                                        busy_words(order, rounds.contended, base.number)))
    settled, tie = _settle_tie(setup, trials, rounds, base, settled, rng, stop, run, floor, same)
    # Every finalist's interval over the rounds it was measured in, the dropped ones too.
    every = candidates(trials, rounds, [t.number for t in finals], base)
    record = _record([t.number for t in finals], rounds, every, settled, base, why,
                     sum(rounds.seconds), setup)
    decide_same(record, settled, same, setup.study.confirm_precision)
    record["trusted_rounds"] = floor
    record["expected_round_s"] = round(round_s, 1)
    record["trusted_noise"] = round(max_noise(trials.values(), rounds), 4)
    if tie:
        record["tie_settling"] = tie
    if race_rounds:
        record["race"] = {"rounds": race_rounds, "spent_s": round(race_s, 1),
                          "dropped": sorted(dropped)}
    set_study_attrs(study, {"confirmation": record})
    _log(record, study)
    return record


def _announce(setup: StudySetup, base: int, active: list[int], same: Collection[int], runs: int,
              floor: int, noise: float, round_s: float) -> None:
    """Say what the rounds compare, when they may stop, and what they are expected to cost."""
    others = [n for n in active if n != base]
    log.info("confirming: trials %s and the baseline (trial %d%s) in randomized rounds: at "
             "least %d, then until +-%.0f%% (trusted from round %d: windows %s noisy) or %.0fs",
             ", ".join(map(str, others)), base,
             ", itself a finalist" if len(others) < len(active) else "", runs,
             100 * setup.study.confirm_precision, floor,
             f"{100 * noise:.1f}%" if noise else "not known how", setup.study.confirm_budget_s)
    if set(same) - {base}:
        log.info("  trains the same model as yours (speed and numerics knobs only): trial(s) %s, "
                 "for the same-training answer", ", ".join(map(str, sorted(set(same) - {base}))))
    spread = setup.round_spread
    expected = (expected_rounds(spread.spread, setup.study.confirm_precision, max(runs, floor))
                if spread else 0)
    log.info("  %s", round_words(round_s, runs, floor, setup.study.confirm_budget_s, expected,
                                 spread.words() if spread else ""))


def only_baseline(finals: Collection[FrozenTrial], base: FrozenTrial) -> bool:
    """Whether the finalists are the baseline alone: then there is nothing to confirm."""
    return all(t.number == base.number for t in finals)


def _settle_tie(setup: StudySetup, trials: dict[int, FrozenTrial], rounds: Rounds,
                base: FrozenTrial, settled: list[Candidate], rng: random.Random,
                stop: StopFlag | None, run: Callable[..., WindowResult], floor: int = PRECISE_ROUNDS,
                same: Collection[int] = ()) -> tuple[list[Candidate], dict[str, Any] | None]:
    """Rounds of the leader, the finalist the tie-break would export in its place, and the
    baseline, while their rounds have not settled which is faster (choose.unsettled), up to
    TIE_BUDGET_SHARE of the budget again. The other finalists sit these rounds out (None in
    their runs keeps every list aligned by round). Returns the candidates still in question
    and what the extra rounds did (None: no tie needed them)."""
    start, spent = len(rounds.order), 0.0
    budget = TIE_BUDGET_SHARE * setup.study.confirm_budget_s
    pair = unsettled(settled, setup.study.confirm_precision)
    if not pair:
        return settled, None
    first = [c.number for c in pair]
    while pair:
        last = rounds.seconds[-1] if rounds.seconds else 0.0
        if (spent + last > budget or len(rounds.order) >= MAX_ROUNDS or past_end(setup, rounds)
                or (stop and stop.reason)):
            break
        active = [c.number for c in settled]
        order = [c.number for c in pair] + [base.number]
        rng.shuffle(order)
        run_round(setup, trials, order, rounds, stop, run)  # the others sit it out (None)
        spent += rounds.seconds[-1]
        cands = candidates(trials, rounds, active, base)
        settled = eliminate(cands, same, floor)
        pair = unsettled(settled, setup.study.confirm_precision)
    outcome = "unsettled when the budget was spent: the tie-break stands"
    if not pair and settled:
        winner, _ = pick(settled, setup.study.confirm_precision)
        lead = max(settled, key=lambda c: c.interval.point)
        outcome = (f"trial {winner.number}, the leader, is exported"
                   if winner is lead else
                   "the rounds show them within the precision: the tie-break stands")
    extra = len(rounds.order) - start
    words = (f"the tie-break would have exported trial {first[1]} over the leader, trial "
             f"{first[0]}, before their rounds told them apart: {extra} more round(s) of the "
             f"two and the baseline ({spent:.0f}s): {outcome}")
    return settled, {"trials": first, "rounds": extra, "spent_s": round(spent, 1),
                     "outcome": outcome, "words": words}


def candidates(trials: dict[int, FrozenTrial], rounds: Rounds, active: list[int],
                base: FrozenTrial) -> list[Candidate]:
    base_knobs = trial_attrs(base)["knobs"]
    out = []
    for n in active:
        if n == base.number:
            k = len(rounds.order)
            iv = Interval(1.0, 1.0, 1.0, k) if k >= MIN_ROUNDS else Interval(1.0, 0.0, float("inf"), k)
        else:
            busy = [a or b for a, b in zip(rounds.contended[n], rounds.contended[base.number],
                                           strict=False)]
            iv = interval_of(rounds.runs[n], rounds.runs[base.number], busy)
        if iv.rounds == 0:
            continue  # every window of it failed: not a candidate
        attrs = trial_attrs(trials[n])
        out.append(Candidate(n, iv, len(changed_knobs(attrs["knobs"], base_knobs)),
                             float(attrs.get("peak_memory_gb") or 0.0), tuple(rounds.runs[n])))
    return out


def max_noise(trials: Collection[FrozenTrial], rounds: Rounds) -> float:
    """The noisiest of the compared configurations: each one's search window's own spread
    (its two halves) and, from 3 rounds on, how much its rounds differ. 0 when any window's
    spread is unknown: then nothing vouches for a few rounds' agreement."""
    spreads = [search_noise(t) for t in trials]
    if not spreads or min(spreads) <= 0:
        return 0.0
    between = [cv([v for v in vals if v]) for vals in rounds.runs.values()
               if len([v for v in vals if v]) >= MIN_ROUNDS]
    return max(spreads + between)


def trusted_rounds(noise: float, precision: float) -> int:
    """The fewest rounds whose interval may end the confirmation on precision, or drop a
    finalist: where the windows' own noise (measured apart from the rounds' agreement) makes an
    interval of +-precision expected at n rounds, n rounds' agreement is not luck. Noisy or
    unknown windows need PRECISE_ROUNDS; a quiet GPU's 1% windows need 3."""
    if noise <= 0:
        return PRECISE_ROUNDS
    sd = math.sqrt(2) * noise  # the log ratio of two windows, each this noisy
    for n in range(MIN_ROUNDS, PRECISE_ROUNDS):
        if t975(n - 1) * sd / math.sqrt(n) <= precision:
            return n
    return PRECISE_ROUNDS


def _stop_reason(setup: StudySetup, rounds: Rounds, cands: list[Candidate], runs: int,
                 spent_s: float, floor: int = PRECISE_ROUNDS, base: int | None = None
                 ) -> str | None:
    """Why the rounds stop (None: another round). The least rounds and the trusted floor are
    counted per candidate, in the rounds where it and the baseline were both measured: a
    contender the search's race took in late has fewer than the rounds run."""
    if not cands:
        return "failed"
    done = min((rounds.paired(c.number, base) if base is not None and c.number != base
                else len(rounds.order)) for c in cands)
    if done < runs:
        return None
    if done >= max(floor, MIN_ROUNDS) and precise(cands, setup.study.confirm_precision):
        return "precision"
    if len(rounds.order) >= MAX_ROUNDS:
        return "rounds"
    # Stop before a round that would end past the budget (rounds take about as long as the last).
    if spent_s + rounds.seconds[-1] > setup.study.confirm_budget_s or past_end(setup, rounds):
        return "budget"
    return None


def past_end(setup: StudySetup, rounds: Rounds) -> bool:
    """Whether a round like the last would end past the time the study's budget gives the
    rounds (study.time_budget_s: what the numerics check after them needs is left to it)."""
    last = rounds.seconds[-1] if rounds.seconds else 0.0
    return setup.confirm_end is not None and time.monotonic() + last > setup.confirm_end


def _record(finals: list[int], rounds: Rounds, cands: list[Candidate],
            settled: list[Candidate], base: FrozenTrial, why: str, spent_s: float,
            setup: StudySetup) -> dict[str, Any]:
    record: dict[str, Any] = {
        "method": "randomized interleaved rounds; speedup = geometric mean of the rounds' "
                  "ratios over the baseline; 95% Student-t interval on the log ratios",
        "finalists": finals,
        "baseline_trial": base.number,
        # Over the memory limit (a DDP run whose ranks cannot hold the model): it is measured
        # as the speed to compare with, but cannot be kept (choose.decide).
        "baseline_fits": not over_limit(base),
        "rounds": len(rounds.order),
        "order": rounds.order,
        "runs": {str(n): [None if v is None else round(v, 3) for v in vals]
                 for n, vals in rounds.runs.items()},
        "contended": {str(n): v for n, v in rounds.contended.items()},
        "intervals": {str(c.number): {**c.interval.as_dict(), "changed": c.changed,
                                      "peak_memory_gb": c.peak_memory_gb} for c in cands},
        "dropped": sorted({c.number for c in cands} - {c.number for c in settled}),
        "stopped": why,
        "precision": setup.study.confirm_precision,
        "budget_s": setup.study.confirm_budget_s,
        "spent_s": round(spent_s, 1),
        "window_noise": round(window_noise(rounds.runs), 3),
        "load": load_summary(rounds.loads),
        "loads": [compact_load(c) for c in rounds.loads],
        "failures": rounds.failures,
    }
    return decide(record, settled, setup.study.confirm_precision)


def _log(record: dict[str, Any], study: optuna.Study) -> None:
    if "best_trial" not in record:
        log.warning("confirmation failed: %s", "; ".join(record["failures"]))
        return
    search_best = best_trial(study)
    log.info("confirmed after %d rounds (%s, %.0fs): trial %d %s; window noise %.0f%%%s",
             record["rounds"], record["stopped"], record["spent_s"], record["leader"],
             record["speedup_text"], 100 * record["window_noise"],
             "" if search_best is None or search_best.number == record["leader"] else
             # Noise-aware (trials.best_trial): a later trial that read faster, within the
             # windows' noise, did not take over; "fastest" named the baseline beside a
             # finalist whose search figure was 11% higher (a gpt study, 2026-11-28).
             f" (the search's best was trial {search_best.number}: no trial read faster by "
             "more than its windows' noise)")
    if record.get("tie_settling"):
        log.info("  %s", record["tie_settling"]["words"])
    if record.get("tie"):
        log.info("  %s", record["tie"])
    if record.get("baseline_fits") is False:
        log.warning("  your configuration (trial %s) is over the memory limit: the fastest "
                    "finalist that fits, trial %d, is exported (%s of its speed)",
                    record["baseline_trial"], record["best_trial"], record["speedup_text"])
    elif record["established"] is False:
        log.warning("  no finalist is shown faster than the baseline (its interval includes "
                    "1.0): the baseline's configuration is kept")
    same = record.get("same_training") or {}
    if same.get("same_as_best") is False and "leader" in same:
        log.info("  same training: trial %d %s", same["leader"], same.get("speedup_text"))
