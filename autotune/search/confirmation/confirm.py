"""Re-measuring the finalists: randomized interleaved rounds until the choice is decided.

The best of N noisy trials is biased upward (it won partly by luck), and a baseline measured
once at the start is exposed to whatever the machine was doing then. So after the search the
``top`` fastest distinct configurations and the baseline are measured again in rounds: each
round runs every one of them once, in a random order (Abedi and Brecht, ICPE 2017: randomized
multiple interleaved trials; a fixed order lets a periodic load or a warming machine favour
one position). The finalists' search windows made them finalists and ran minutes apart: they
order the finalists but are not a round (selection.py says what a simulation measured with
them); the rounds of the search's race, where it raced, are the first ones.

The rounds answer which finalist to export, not how fast each one is to +-5%: a fully
sequential indifference-zone selection (search/confirmation/selection.py; Kim and Nelson, ACM
TOMACS 2001) drops a finalist as soon as another is shown ahead of it by more than its
triangle allows, and the rounds stop when one finalist remains or those left lie within
``study.indifference`` of each other, for both answers (the same-training finalists race in
their own group too), after at least ``runs`` rounds; ``study.confirm_budget_s`` caps them,
the tie-break's included. The exported speedup's interval over the baseline is the one
measured at that point (results/intervals.py), its width said; only where the user asks for
``study.confirm_precision`` do the rounds of the answers and the baseline go on until their
intervals are that narrow. Every comparison leaves out rounds with a contended window by one
rule (results/intervals.counted_rounds); a decision waits for quiet rounds, so a disturbed one
is in effect measured again.

Before 2026-12-01 every finalist still racing had to reach +-5% over the baseline, and a tie
the tie-break would decide against the leader got up to half the budget again: tied finalists
(1.34x, 1.36x, 1.33x) of a 4-layer GPT study were measured for 6:59 after a 1:08 search, and
the two studies with ties ran 35% and 39% past their stated wall time.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from collections.abc import Callable, Collection
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.core.console import detail, say
from autotune.measure.protocol import WindowResult
from autotune.measure.runner import run_window
from autotune.results.intervals import MIN_ROUNDS, Interval
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
from autotune.search.confirmation import selection
from autotune.search.confirmation.choose import (
    Candidate,
    answered_same,
    answers,
    changed_knobs,
    cv,
    decide,
    decide_same,
    decided,
    interval_of,
    precise,
    window_noise,
)
from autotune.search.confirmation.forecast import after_round, cap_rounds, prior_spread
from autotune.search.confirmation.rounds import (
    Rounds,
    compact_load,
    expected_round_s,
    load_summary,
    raced,
    run_round,
)
from autotune.search.confirmation.selection import PRECISE_ROUNDS, Selection, trusted_rounds
from autotune.search.confirmation.vet import vet_leaders
from autotune.search.confirmation.words import (
    MAX_ROUNDS,
    Ahead,
    announce,
    busy_words,
    progress_words,
    race_words,
    round_line,
    selection_rounds,
)
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")

__all__ = ["PRECISE_ROUNDS", "confirm", "eliminate", "selection_rounds", "terms",
           "trusted_rounds"]


def eliminate(cands: list[Candidate], same: Collection[int], sel: Selection) -> list[Candidate]:
    """The candidates still in question for either answer (selection.racing): a pair decides
    nothing before its first stage's quiet rounds, so a contender that joined late, or one
    whose windows failed or ran beside other work, is kept until it has them."""
    return selection.racing(cands, same, sel)


def terms(setup: StudySetup, trials: Collection[FrozenTrial], systems: int) -> Selection:
    """The selection's terms for these configurations: the user's zone and probability of
    correct selection, and the windows' own noise (0 where any window's is unknown): the
    median of their search windows' spreads, as a window's standard deviation
    (selection.window_sd). The largest, which this was, is one window's two halves: on the
    README's study one window at 36% (the others 1-7%) held every pair's variance so high
    that nothing was dropped in 7 rounds, the 8 finalists measured to the budget's end
    (2026-12-01)."""
    spreads = [search_noise(t) for t in trials]
    noise = selection.window_sd(statistics.median(spreads)) if spreads and min(spreads) > 0 \
        else 0.0
    return Selection(setup.study.indifference, setup.study.correct_selection, max(2, systems),
                     noise)


def confirm(setup: StudySetup, study: optuna.Study, runs: int, top: int = 1,
            stop: StopFlag | None = None,
            run: Callable[..., WindowResult] = run_window,
            vet: Callable[[int], bool] | None = None) -> dict[str, Any] | None:
    """Measure the finalists and the baseline in rounds; record and return the confirmation
    (``run``: how a window is measured; the strategy benchmark serves stored windows).
    ``vet``: the numerics check of a trial (False: refused), run on each answer's leader once
    it leads after the least rounds (``runs``), so that the rounds go on without a finalist
    that could not be exported (search/checks/numerics.py's ``vetting``); before, the check ran
    after the rounds and a vision recipe spent 3 minutes of them on finalists it then refused.
    Not before the least rounds: a leader after one round is one window's luck, and a GPT
    study checked a finalist at batch 32 that led after round 1 only (7.04x against 6.99x),
    its reference's three seeds about 3.5 minutes of the study (its check ~780 s, the other
    two runs' ~575 s; 2026-12-07)."""
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
    race_rounds, race_s = len(rounds.order), sum(rounds.seconds)
    for n in trials:
        rounds.join(n)
    active = [t.number for t in finals if t.number not in dropped] or [t.number for t in finals]
    # The selection's groups: every finalist the race left, dropped later or not (a drop is
    # for good, selection.survivors replays the rounds; one that dropped another counts).
    members = list(active)
    rng = random.Random(f"{study.study_name}-{setup.seed}")
    sel = terms(setup, trials.values(), len({t.number for t in finals}))
    round_s = expected_round_s(trials.values())
    announce(setup, base.number, active, same, runs, sel, round_s)
    said: set[str] = set()  # what the rounds' lines have explained once (words.py)
    forecasts: list[Ahead] = []  # after each round: the rounds and seconds expected after it
    refused: dict[int, int] = {}  # refused by the numerics check: trial -> its round
    why = None
    group = settled = candidates(trials, rounds, members, base)
    if race_rounds:  # the search raced: its rounds count, and may already be enough
        detail("  %s", race_words(race_rounds, race_s, settled, dropped, base.number))
    if rounds.order:  # the race's rounds; a finalist with no round in them yet stays
        kept = eliminate(group, same, sel)
        active = [n for n in active if n in {c.number for c in kept}
                  or n not in {c.number for c in group}]
        settled = kept
        if all(rounds.paired(n, base.number) for n in active if n != base.number):
            why = _stop_reason(setup, rounds, group, same, sel, runs, base.number, round_s)
    while not why:
        measuring = _measuring(setup, group, same, sel) or (
            set(active) - answered_same(group, same, sel, _baseline(rounds, base.number),
                                        rounds, runs))
        order = [n for n in trials if n in measuring or n == base.number]
        rng.shuffle(order)
        run_round(setup, trials, order, rounds, stop, run)
        group = candidates(trials, rounds, members, base)
        settled = eliminate(group, same, sel)
        out = vet_leaders(vet if len(rounds.order) >= runs else None,
                          answers(settled, same, sel), base.number, refused, len(rounds.order))
        if out:
            members = [n for n in members if n not in out]
            group = candidates(trials, rounds, members, base)
            settled = eliminate(group, same, sel)
        gone = sorted(set(active) - {c.number for c in settled})
        active = [c.number for c in settled]
        why = _stop_reason(setup, rounds, group, same, sel, runs, base.number, round_s)
        against = (selection.decided(group, same, sel)
                   and not decided(group, same, sel, _baseline(rounds, base.number)))
        ahead = None if why else _forecast(setup, rounds, members, base.number, sel, runs)
        if ahead is not None:
            forecasts.append(ahead)
        say(round_line(len(rounds.order), settled, sum(rounds.seconds), base.number, gone,
                       ahead.more_s if ahead else None))
        detail("  %s", progress_words(len(rounds.order), settled, sel, sum(rounds.seconds),
                                      setup.study.confirm_budget_s, base.number, said,
                                      busy_words(order, rounds.contended, base.number), gone,
                                      against, ahead))
    # Every finalist's interval over the rounds it was measured in, the dropped ones too.
    every = candidates(trials, rounds, [t.number for t in finals], base)
    record = _record([t.number for t in finals], rounds, every, settled, base, why, setup, sel,
                     group)
    if refused:
        record["refused"] = {str(n): r for n, r in refused.items()}
    decide_same(record, group, same, sel)
    record["decided"] = decided(group, same, sel, _baseline(rounds, base.number))
    record["expected_round_s"] = round(round_s, 1)
    if forecasts:
        record["forecast"] = [f.as_dict() for f in forecasts]
    record["trusted_noise"] = round(max_noise(trials.values(), rounds), 4)
    if race_rounds:
        record["race"] = {"rounds": race_rounds, "spent_s": round(race_s, 1),
                          "dropped": sorted(dropped)}
    set_study_attrs(study, {"confirmation": record})
    _log(record, study)
    return record


def _forecast(setup: StudySetup, rounds: Rounds, members: list[int], base: int,
              sel: Selection, runs: int) -> Ahead:
    """After a round: the rounds expected after it (forecast.after_round: the rounds run kept,
    the rest simulated at the finalists' means and the spread so far) and their seconds, each
    as long as the last round (the finalists still measured), within the budget's rounds."""
    done = len(rounds.order)
    last = rounds.seconds[-1] if rounds.seconds else 0.0
    left_s = setup.study.confirm_budget_s - sum(rounds.seconds)
    # study.confirm_runs are the least rounds, whatever the budget (_stop_reason); the
    # selection's first stage is no floor against it: at 2026-12-06 a GPT study without a
    # window noise (first stage 6) said 5 more rounds after its first where its budget held 3.
    cap = cap_rounds(left_s, last, done, least=runs)
    prior = prior_spread(setup.round_spread, sel)
    shown = {n: rounds.runs[n] for n in [*members, base] if n in rounds.runs}
    busy = {n: rounds.contended[n] for n in shown}
    f = after_round(shown, busy, base, prior, sel, runs, cap)
    return Ahead(done, f.more(done), f.more(done) * last, f.spread)



def _baseline(rounds: Rounds, base: int) -> Candidate | None:
    """The baseline as the selection compares it: its figures and contended windows."""
    if not any(rounds.runs.get(base) or ()):
        return None
    k = len(rounds.order)
    return Candidate(base, Interval(1.0, 1.0, 1.0, k), 0, 0.0, tuple(rounds.runs[base]),
                     tuple(rounds.contended[base]))


def _measuring(setup: StudySetup, settled: list[Candidate], same: Collection[int],
               sel: Selection) -> set[int]:
    """Who the next round measures besides the baseline once both answers are decided and the
    user asked for study.confirm_precision: the two answers alone, until their intervals are
    that narrow (empty: every candidate still in question)."""
    if setup.study.confirm_precision is None or not settled or not decided(
            settled, same, sel, None):
        return set()
    return {c.number for c in answers(settled, same, sel)}



def only_baseline(finals: Collection[FrozenTrial], base: FrozenTrial) -> bool:
    """Whether the finalists are the baseline alone: then there is nothing to confirm."""
    return all(t.number == base.number for t in finals)


def candidates(trials: dict[int, FrozenTrial], rounds: Rounds, active: list[int],
               base: FrozenTrial) -> list[Candidate]:
    """The ``active`` trials as the choice sees them: each one's interval over the baseline
    over the rounds that count, its own figures and contended windows by round."""
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
                             float(attrs.get("peak_memory_gb") or 0.0), tuple(rounds.runs[n]),
                             tuple(rounds.contended[n])))
    return out


def max_noise(trials: Collection[FrozenTrial], rounds: Rounds) -> float:
    """The noisiest of the compared configurations: each one's search window's own standard
    deviation (from its two halves) and, from 3 rounds on, how much its rounds differ. 0 when
    any window's spread is unknown: then nothing vouches for a few rounds' agreement."""
    spreads = [selection.window_sd(search_noise(t)) for t in trials]
    if not spreads or min(spreads) <= 0:
        return 0.0
    between = [cv([v for v in vals if v]) for vals in rounds.runs.values()
               if len([v for v in vals if v]) >= MIN_ROUNDS]
    return max(spreads + between)


def _stop_reason(setup: StudySetup, rounds: Rounds, cands: list[Candidate], same: Collection[int],
                 sel: Selection, runs: int, base: int, round_s: float) -> str | None:
    """Why the rounds stop (None: another round). The least rounds are counted per candidate,
    in the rounds where it and the baseline were both measured: a contender the search's race
    took in late has fewer than the rounds run."""
    if not cands:
        return "failed"
    live = eliminate(cands, same, sel) or cands  # the dropped ones' rounds stopped for good
    done = min((rounds.paired(c.number, base) if c.number != base else len(rounds.order))
               for c in live)
    if done < runs:
        return None
    prec = setup.study.confirm_precision
    if decided(cands, same, sel, _baseline(rounds, base)):
        if prec is None:
            return "decided"
        floor = trusted_rounds(sel.noise, prec)
        if done >= max(floor, MIN_ROUNDS) and precise(answers(cands, same, sel), prec):
            return "precision"
    if len(rounds.order) >= MAX_ROUNDS:
        return "rounds"
    # Stop before a round that would end past the budget (rounds take about as long as the
    # last; the search's round took none of it: then as long as expected).
    last = rounds.seconds[-1] or round_s
    if sum(rounds.seconds) + last > setup.study.confirm_budget_s or past_end(setup, last):
        return "budget"
    return None


def past_end(setup: StudySetup, last: float) -> bool:
    """Whether a round of ``last`` seconds would end past the time the study's budget gives
    the rounds (study.time_budget_s: what the numerics check after them needs is left to it)."""
    return setup.confirm_end is not None and time.monotonic() + last > setup.confirm_end


def _record(finals: list[int], rounds: Rounds, cands: list[Candidate],
            settled: list[Candidate], base: FrozenTrial, why: str, setup: StudySetup,
            sel: Selection, group: list[Candidate]) -> dict[str, Any]:
    """The confirmation's record; the choice (choose.decide) among the selection's whole
    ``group``, whose drops it replays (``settled``: those still in question)."""
    record: dict[str, Any] = {
        "method": "randomized interleaved rounds; the finalist chosen by a fully sequential "
                  "indifference-zone selection (Kim and Nelson 2001) on the paired log ratios; "
                  "speedup = geometric mean of the rounds' ratios over the baseline; 95% "
                  "Student-t interval on the log ratios; rounds with a contended window left "
                  "out of every comparison",
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
        "selection": sel.as_dict(),
        "precision": setup.study.confirm_precision,
        "budget_s": setup.study.confirm_budget_s,
        "spent_s": round(sum(rounds.seconds), 1),
        "window_noise": round(window_noise(rounds.runs), 3),
        "load": load_summary(rounds.loads),
        "loads": [compact_load(c) for c in rounds.loads],
        "failures": rounds.failures,
    }
    return decide(record, group, sel)


def _log(record: dict[str, Any], study: optuna.Study) -> None:
    if "best_trial" not in record:
        log.warning("confirmation failed: %s", "; ".join(record["failures"]))
        return
    search_best = best_trial(study)
    detail("confirmed after %d rounds (%s, %.0fs): trial %d %s; window noise %.0f%%%s",
             record["rounds"], record["stopped"], record["spent_s"], record["leader"],
             record["speedup_text"], 100 * record["window_noise"],
             "" if search_best is None or search_best.number == record["leader"] else
             # Noise-aware (trials.best_trial): a later trial that read faster, within the
             # windows' noise, did not take over; "fastest" named the baseline beside a
             # finalist whose search figure was 11% higher (a gpt study, 2026-11-28).
             f" (the search's best was trial {search_best.number}: no trial read faster by "
             "more than its windows' noise)")
    for key in ("tie", "undecided"):
        if record.get(key):
            detail("  %s", record[key])
    if record.get("baseline_fits") is False:
        log.warning("  your configuration (trial %s) is over the memory limit: the fastest "
                    "finalist that fits, trial %d, is exported (%s of its speed)",
                    record["baseline_trial"], record["best_trial"], record["speedup_text"])
    elif record["established"] is False:
        log.warning("  no finalist is shown faster than the baseline (its interval includes "
                    "1.0): the baseline's configuration is kept")
    same = record.get("same_training") or {}
    if same.get("same_as_best") is False and "leader" in same:
        detail("  same training: trial %d %s", same["leader"], same.get("speedup_text"))
