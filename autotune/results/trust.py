"""Whether the study could measure at all, and the words when it could not.

A study on a machine that stays busy still produces figures: they describe the machine's
moods, not the configurations. Even a precise ratio does when the load fell on one side of it
(one_sided). Confirmation runs until its choice is decided or its
budget is spent (search/confirmation/confirm.py); when it ends on the budget undecided while most
windows were contended, or with the winner's speedup still known only to more than three times
the precision asked (the indifference zone where none was), the study says so, names the load it saw ("other processes used 1.7 of 2 cores during
9 of 12 windows") or the noise, exports only
what its intervals support (search/confirmation/confirm.py keeps the user's configuration when the winner's
interval includes 1.0) and exits with search/run.py's COULD_NOT_MEASURE, so that a scheduler
can tell. Read from the stored study alone: best.yaml, the summary and the report say the same.
"""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from autotune.diagnose.thresholds import (
    CONTENDED_WINDOWS_SHARE,
    IMPRECISE_FACTOR,
    NOISY_WINDOWS_CV,
)
from autotune.results.intervals import MIN_ROUNDS, compared
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
    contended). Windows contended by steal or a CPU quota alone ("2 of 42 windows were
    contended: the hypervisor took 8-10% of the CPU time (steal)") do not name other
    processes' 0.0 cores, and say each cause once over its range, not once per window."""
    busy = [c for c in loads if c.get("contended")]
    if not busy:
        return None
    others = statistics.fmean(float(c.get("other_cpu_cores") or 0.0) for c in busy)
    # Other processes' cores are counted over the machine: a rank's window (cpus 1, its own
    # core) said "0.6 of 1 cores" on a 2-core node (2026-11-28). Older records lack the field.
    cpus = max(int(c.get("machine_cpus") or c.get("cpus") or 0) for c in loads)
    waits = [float(c.get("runqueue_wait_share") or 0.0) for c in busy]
    if round(others, 1) > 0:
        words = (f"other processes used {others:.1f} of {cpus} core{'s' if cpus != 1 else ''} "
                 f"during {len(busy)} of {len(loads)} windows")
    else:
        words = f"{len(busy)} of {len(loads)} windows were contended"
    if any(waits):
        words += (f", and the trial's threads waited for a core {statistics.fmean(waits):.0%} "
                  "of the time they were ready to run")
    extra = _causes(busy)
    return words + (f" ({'; '.join(extra)})" if extra else "")


#: Causes a window's ``reasons`` name with a share, said once over their range
#: (measure/contention.between writes them).
_SHARED_CAUSES = (("steal_share", "the hypervisor took", "{} of the CPU time (steal)"),
                  ("throttled_share", "the container's CPU quota",
                   "held the trial back {} of the time"))


def _causes(busy: list[dict[str, Any]]) -> list[str]:
    """The contended windows' causes other than other processes: steal and quota each once,
    as the range of their shares over the windows they contended ("8-10%"), then the rest
    (the GPU's) as the windows name them."""
    reasons = [r for c in busy for r in c.get("reasons") or []]
    out = []
    for key, prefix, tail in _SHARED_CAUSES:
        shares = sorted({round(100 * float(c.get(key) or 0.0)) for c in busy
                         if any(r.startswith(prefix) for r in c.get("reasons") or [])})
        if shares:
            span = f"{shares[0]}%" if len(shares) == 1 else f"{shares[0]}-{shares[-1]}%"
            out.append(f"{prefix} {tail.format(span)}")
    skip = ("other processes",) + tuple(prefix for _, prefix, _ in _SHARED_CAUSES)
    return out + sorted({r for r in reasons if not r.startswith(skip)})


def could_not_measure(study: optuna.Study) -> str | None:
    """The statement when the study could not measure (None: it could): the load fell on one
    side of the exported comparison (one_sided), or its confirmation ended on its budget or
    round limit, not on its precision, and either most windows were contended (too busy) or
    the rounds left the winner's speedup known only to more than IMPRECISE_FACTOR x the
    precision asked (too noisy to rank configurations), unless that imprecision is only the
    baseline's own spread (baseline_noise)."""
    conf = study_attrs(study).get("confirmation") or {}
    if not conf:
        return None
    loads = window_loads(study)
    return one_sided(conf, loads) or _unsettled(conf, loads)


def one_sided(conf: dict[str, Any], loads: list[dict[str, Any]]) -> str | None:
    """A precise speedup can still describe the load rather than the configurations: beside
    `stress-ng --cpu 1` in another session the baseline's two intra-op threads waited for a
    core half the time (9 samples/s) while one-thread finalists did not (187): 20.3x, 95% CI
    19.1-21.6x, where the idle machine's median is 1.9x. When fewer than MIN_ROUNDS of the winner's
    paired rounds were quiet on both sides and the load hit one side only in most of them (and
    in MIN_ROUNDS at least: a passing load in one of three rounds is not a finding), the ratio
    is what this machine gives beside that load, not what a quiet one would."""
    n, base = conf.get("leader"), conf.get("baseline_trial")
    if n is None or n == base:
        return None
    flags = conf.get("contended") or {}
    pairs = list(zip(flags.get(str(n)) or [], flags.get(str(base)) or [], strict=False))
    quiet = sum(1 for a, b in pairs if not a and not b)
    lopsided = sum(1 for a, b in pairs if bool(a) != bool(b))
    if quiet >= MIN_ROUNDS or lopsided < MIN_ROUNDS or 2 * lopsided < len(pairs):
        return None
    # The leader's own words ("13.22x, 95% CI 12.42-14.07x, 9 rounds"), as best.yaml says them:
    # the stored interval is rounded to 3 places and would print 12.41.
    figure = f"speedup, {conf['speedup_text']}," if conf.get("speedup_text") else "speedup"
    load = load_statement(loads)
    return (f"this machine was too busy to measure: the load fell on one side of the "
            f"comparison (the baseline's windows were contended in "
            f"{sum(1 for _, b in pairs if b)} of {len(pairs)} rounds, trial {n}'s in "
            f"{sum(1 for a, _ in pairs if a)}{'; ' + load if load else ''}), so trial {n}'s "
            f"{figure} is what this machine gives beside that load, not what the "
            "configurations give on a quiet one; "
            + ("it is exported as measured" if conf.get("established") else
               "it is exported as measured: your own configuration is over the memory limit"
               if conf.get("baseline_fits") is False else
               "no speedup is exported: its interval does not exclude 1.0")
            + ". Run the study again on a quieter machine to rank the configurations.")


def _unsettled(conf: dict[str, Any], loads: list[dict[str, Any]]) -> str | None:
    """Ended on the budget undecided or short of the precision: too busy or too noisy (see
    above)."""
    if (conf.get("stopped") not in ("budget", "rounds") or conf.get("precise")
            or (conf.get("decided") and not conf.get("precision"))
            or int(conf.get("rounds") or 0) < MIN_ROUNDS):
        return None  # decided or precise; or too few rounds asked for (study.confirm_runs)
    busy = sum(1 for c in loads if c.get("contended"))
    crowded = bool(loads) and busy / len(loads) >= CONTENDED_WINDOWS_SHARE
    precision = reference_width(conf)
    known = _known_to(conf)
    imprecise = known is None or known > IMPRECISE_FACTOR * precision
    if not (crowded or imprecise) or (not crowded and baseline_noise(conf)):
        return None
    noise = float(conf.get("window_noise") or 0.0)
    parts = [load_statement(loads) or ""] if crowded else []
    if imprecise:
        parts.append(
            f"after {conf.get('rounds')} rounds the speedup is known only to "
            + (f"+-{known:.0%}" if known is not None else "no interval")
            + f", with windows of one configuration differing by {noise:.0%} (coefficient of "
            f"variation{'; pyperf warns above ' + format(NOISY_WINDOWS_CV, '.0%') if noise > NOISY_WINDOWS_CV else ''}"
            f"){_round_spread(conf)}")
    # Beside a load on both sides the ratio cancels what the load does to both alike, not
    # what it does to each: hog1 of 406e63c confirmed 3.23x (3.08-3.39) beside stress-ng
    # --cpu 1 where the idle runs' median was 2.07x.
    verdict = ("the speedup above is supported by its interval"
               + (" beside that load, which is what this machine gives beside it, not what "
                  "the configurations give on a quiet one" if crowded else "")
               if conf.get("established") else
               "your own configuration is over the memory limit: the fastest finalist that "
               "fits is exported, at the figure its interval gives"
               if conf.get("baseline_fits") is False else
               "no speedup is exported: the confirmed interval does not exclude 1.0, so your "
               "own configuration stays")
    head = ("this machine was too busy to measure" if crowded else
            "this machine's measurements were too noisy to rank configurations")
    return (f"{head}: {'; '.join(p for p in parts if p)}. Confirmation spent its budget "
            f"({conf.get('spent_s')} of study.confirm_budget_s={conf.get('budget_s')}s, "
            f"{conf.get('rounds')} rounds) without "
            + (f"reaching +-{100 * precision:.0f}%" if conf.get("precision") else
               "deciding among the finalists")
            + f"; {verdict}. "
            "Run the study again on a quieter machine (or raise study.confirm_budget_s) to rank "
            "the configurations.")


def reference_width(conf: dict[str, Any]) -> float:
    """The interval width a confirmation is judged against: the precision asked, else the
    indifference zone (a speedup known to worse than a few zones ranks nothing)."""
    zone = (conf.get("selection") or {}).get("indifference")
    return float(conf.get("precision") or zone or 0.05)


def baseline_noise(conf: dict[str, Any]) -> str | None:
    """Why the speedup is imprecise when only the baseline is (None: not that case).

    On one H100 (2026-11-26) the README's study's baseline (its loader in the training
    process) read 564, 464 and 667 samples/s in three rounds while the leader read 10,281-10,423
    and the runner-up 9,209-9,524: 18.51x, 95% CI 11.66-29.38x, yet the leader beat the
    runner-up in every round (1.06-1.15x). The finalists were ranked and the winner established;
    only the speedup's size was uncertain, and that is the baseline's own spread, not the
    machine's, so it is no reason for COULD_NOT_MEASURE. That holds while the leader's rounds
    agree to the precision asked, its speedup excludes 1.0, and it beats every other finalist
    still measured (its paired interval over each above 1.0) or matches it to the precision."""
    leader, base = str(conf.get("leader")), str(conf.get("baseline_trial"))
    runs = {str(k): [float(x) for x in v if x] for k, v in (conf.get("runs") or {}).items()}
    precision = reference_width(conf)
    lead_cv, base_cv = _cv(runs.get(leader)), _cv(runs.get(base))
    if (not conf.get("established") or leader == base or lead_cv is None or base_cv is None
            or lead_cv > precision or base_cv <= IMPRECISE_FACTOR * lead_cv):
        return None
    raw = {str(k): v for k, v in (conf.get("runs") or {}).items()}
    busy = {str(k): v for k, v in (conf.get("contended") or {}).items()}
    for other in runs:
        if other in (leader, base):
            continue
        # The rounds that count, as every comparison reads them (intervals.counted_rounds).
        iv = compared(raw[leader], raw[other], busy.get(leader) or (), busy.get(other) or ())
        if not iv.known or not (iv.low > 1.0 or iv.half_width <= precision):
            return None
    return (f"the speedup's interval is wide because the baseline's own windows varied "
            f"{base_cv:.0%} from round to round where trial {leader}'s varied {lead_cv:.1%}: "
            "the finalists are ranked and the winner's lead over the baseline is established; "
            "only the speedup's size is uncertain (raise study.confirm_budget_s to narrow it)")


def _round_spread(conf: dict[str, Any]) -> str:
    """", the baseline's windows varying 18% from round to round, trial 7's 1.2%"."""
    leader, base = str(conf.get("leader")), str(conf.get("baseline_trial"))
    runs = {str(k): [float(x) for x in v if x] for k, v in (conf.get("runs") or {}).items()}
    lead_cv, base_cv = _cv(runs.get(leader)), _cv(runs.get(base))
    if lead_cv is None or base_cv is None or leader == base:
        return ""
    return (f"; from round to round the baseline's windows varied {base_cv:.1%}, trial "
            f"{leader}'s {lead_cv:.1%}")


def _cv(values: list[float] | None) -> float | None:
    if not values or len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def _known_to(conf: dict[str, Any]) -> float | None:
    """The half-width of the winner's (the leader's) interval, relative: 0.05 is +-5%."""
    iv = (conf.get("intervals") or {}).get(str(conf.get("leader"))) or {}
    if iv.get("ci_low") is None or not iv.get("speedup"):
        return None
    return (float(iv["ci_high"]) - float(iv["ci_low"])) / 2 / float(iv["speedup"])
