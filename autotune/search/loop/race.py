"""Racing the finalists during the search, so that the confirmation only tops up.

A confirmation that starts after the last trial measures every finalist from its first round,
and it may drop one only once the pair has its first stage of quiet rounds (selection.py).
Racing methods (F-race, irace: Birattari et al., GECCO 2002; López-Ibáñez et al., 2016)
compare candidates in blocks as they come and drop one as soon as the data say it cannot win.
Here, after a trial whose window puts it among the finalists (results/trials.finalists) and
within FINALIST_BAND of the fastest of them (one that could be the best), one round of the
confirmation's kind runs at once: those close finalists still in the race and the baseline,
each once, in a random order (rounds.run_round). A contender is dropped by the confirmation's
own rule (confirm.eliminate: the indifference-zone selection, on the rounds that count; the
contenders' search windows are not a round, as in the confirmation), so the race and the confirmation
never disagree on what a round shows; its k is fixed at the most finalists the confirmation
can hold (``most_finalists``), as KN fixes it. The rounds and the drops are kept in the study (``race``), so a killed study
resumes with them and the confirmation starts from them: their windows count in its least
rounds, its first stage and its budget (study.confirm_budget_s covers the race's rounds and
its own), and a finalist the search found late gets its rounds there.

The race's share is not all there at the start: by the end of trial k of the n this run
searches it may have spent k/n of it (``progress``; under study.time_budget_s, the share of
the search's time gone where larger: search/loop/budget.search_progress). Early in a search every trial is a close
finalist, and a race free to spend at once spent its whole share on the README's trials 1-6,
which later trials displaced; the winner, found at trial 7 or 8, had no race rounds and 6
rounds in all (2026-11-29). Rounds the allowance refuses early are the confirmation's later.

The race runs with one worker on a study's own storage: several workers sharing a study would
each run rounds on their own cores and write the one record. Their confirmation starts fresh.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.console import detail
from autotune.diagnose.thresholds import FINALIST_BAND
from autotune.measure.protocol import WindowResult
from autotune.measure.runner import run_window
from autotune.results.record import set_study_attrs
from autotune.results.trials import baseline_trial, changes_training, finalists, over_limit
from autotune.search.confirmation.confirm import candidates, eliminate, terms
from autotune.search.confirmation.rounds import expected_round_s, raced, run_round
from autotune.search.loop.budget import search_stop
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")

#: The race may spend this share of study.confirm_budget_s during the search; the rest is the
#: confirmation's, for the finalists found late and the rounds a precision stop needs.
RACE_BUDGET_SHARE = 0.5


def race_round(setup: StudySetup, study: optuna.Study, told: FrozenTrial,
               stop: StopFlag | None = None,
               run: Callable[..., WindowResult] = run_window, progress: float = 1.0) -> bool:
    """After trial ``told``: one round of the contenders and the baseline where ``told`` is
    among the finalists and the race's allowance holds it (``progress``: the share of this
    run's search done, ``told`` included). Returns whether a round ran."""
    base = baseline_trial(study)
    why = _no_round(setup, study, told, base)
    if why is not None or base is None:
        if why:
            log.debug("no race round after trial %d: %s", told.number, why)
        return False
    rounds, dropped = raced(study)
    contenders = [t for t in close_finalists(setup, study, base) if t.number not in dropped]
    trials = {t.number: t for t in [*contenders, base]}
    round_s = expected_round_s(trials.values())
    spent = sum(rounds.seconds)
    share = RACE_BUDGET_SHARE * setup.study.confirm_budget_s
    if spent + round_s > share:
        detail("  race: no round after trial %d: %.0fs of rounds so far and ~%.0fs more would "
                 "pass %.0f%% of study.confirm_budget_s; the confirmation takes it from here",
                 told.number, spent, round_s, 100 * RACE_BUDGET_SHARE)
        return False
    allowed = share * min(1.0, max(0.0, progress))
    if spent + round_s > allowed:
        detail("  race: no round after trial %d yet: %.0fs of rounds so far and ~%.0fs more "
                 "would pass the %.0fs the race may have spent %.0f%% into the search",
                 told.number, spent, round_s, allowed, 100 * progress)
        return False
    if search_stop(setup, study, [round_s]):  # study.time_budget_s: the round does not fit
        return False
    for n in trials:
        rounds.join(n)
    order = list(trials)
    random.Random(f"{study.study_name}-{setup.seed}-race-{len(rounds.order)}").shuffle(order)
    run_round(setup, trials, order, rounds, stop, run)
    cands = candidates(trials, rounds, [t.number for t in contenders], base)
    sel = terms(setup, trials.values(), most_finalists(setup.study.confirm_top))
    same = {n for n, t in trials.items() if not changes_training(study, t, base)}
    kept = {c.number for c in eliminate(cands, same, sel)}
    out = sorted({c.number for c in cands} - kept)
    dropped |= set(out)
    set_study_attrs(study, {"race": {**rounds.as_dict(), "dropped": sorted(dropped),
                                     "selection": sel.as_dict()}})
    detail("  race round %d (%.0fs): %s%s", len(rounds.order), rounds.seconds[-1],
             "; ".join(f"trial {c.number} {c.interval.text()}" for c in cands),
             f"; dropped trial(s) {', '.join(map(str, out))}: another is ahead by more than "
             f"the selection allows (study.indifference={sel.zone:g})" if out else "")
    return True


def most_finalists(top: int) -> int:
    """KN's k for the race: the most finalists the confirmation can hold (results/trials:
    ``finalists`` takes at most 2 x study.confirm_top, ``same_training_finalists`` 2 more),
    fixed before the first round. KN fixes k at the start; counting the contenders not yet
    dropped, as the race did until 2026-12-03, let alpha/(k-1) grow towards alpha as it
    dropped them, while its drops hold in the confirmation. A contender a later trial pushed
    out of the finalists was compared too; the bound does not count it."""
    return 2 * max(1, top) + 2


def _no_round(setup: StudySetup, study: optuna.Study, told: FrozenTrial,
              base: FrozenTrial | None) -> str | None:
    """Why no round follows ``told`` (None: one does)."""
    if not setup.study.race:
        return "study.race is off, or the study has several workers"
    if setup.study.confirm_runs < 1:
        return "no confirmation (study.confirm_runs=0)"
    if base is None or told.number == base.number:
        return "the baseline is measured in every round anyway"
    if told.state != TrialState.COMPLETE or over_limit(told):
        return "it did not complete within the memory limit"
    if told.number not in {t.number for t in close_finalists(setup, study, base)}:
        return f"its window did not read within {FINALIST_BAND:.0%} of the best so far"
    return None


def close_finalists(setup: StudySetup, study: optuna.Study,
                    base: FrozenTrial) -> list[FrozenTrial]:
    """The finalists whose search window read within FINALIST_BAND of the fastest: the ones
    that could be the best. Early in a search every trial is a finalist (there are few), and
    racing them all spent the race's share on configurations that later trials displaced: the
    README's study raced 7 rounds of its first trials, and its winner, found at trial 8, had
    6 rounds in all (a 1.80-2.46x interval where the unraced study's winner had 1.96-2.38x,
    2026-11-29)."""
    finals = [t for t in finalists(study, max(1, setup.study.confirm_top)) if t.number != base.number]
    if not finals:
        return []
    best = max(t.value or 0.0 for t in finals)
    return [t for t in finals if (t.value or 0.0) >= (1 - FINALIST_BAND) * best]
