"""``launch.scaling=true``: how well the launched run scales, measured in the same study.

Scaling efficiency is the run's samples/s over N times what one rank does alone with the same
per-rank configuration (batch, workers, threads, accumulation): 1.0 is perfect, and what is
missing went to the all-reduce, to ranks waiting on the slowest one, and to ranks sharing the
node's memory bandwidth and cores. One rank alone runs on rank 0's share of the cores (its GPU
on CUDA), so the comparison keeps each rank's resources and isolates what running together
costs. The two sides are measured in interleaved rounds, as the confirmation measures its
finalists, so a machine that gets busier part way through moves both; the interval is the
paired one of the confirmation (results/intervals.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from typing import Any

import optuna

from autotune.core.console import detail
from autotune.core.distributed import rank_cores
from autotune.measure.launch import CPUS_ENV
from autotune.measure.protocol import TrialRequest, figure_only
from autotune.measure.runner import run_window
from autotune.results.intervals import MIN_ROUNDS, Interval, paired_speedup
from autotune.results.record import set_study_attrs, trial_attrs
from autotune.results.trials import chosen_trial
from autotune.search.setup import StopFlag, StudySetup

log = logging.getLogger("autotune")

#: Rounds of the two sides: the fewest that state an interval.
SCALING_ROUNDS = MIN_ROUNDS


def _one_rank(setup: StudySetup, req: TrialRequest) -> TrialRequest:
    """The same request as one process on rank 0's share of the cores the ranks split."""
    nproc = setup.launch.nproc_per_node
    env = dict(req.env)
    cores = ([int(c) for c in env[CPUS_ENV].split(",")] if env.get(CPUS_ENV)
             else sorted(os.sched_getaffinity(0)))
    env[CPUS_ENV] = ",".join(map(str, rank_cores(0, nproc, cores)))
    return dataclasses.replace(req, launch=None, env=env)


def measure_scaling(setup: StudySetup, study: optuna.Study, stop: StopFlag | None = None,
                    rounds: int = SCALING_ROUNDS) -> dict[str, Any] | None:
    """The exported trial's configuration as all ranks and as one rank, ``rounds`` times in
    random order; the efficiency with its interval is recorded in the study (``scaling``),
    which best.yaml, the summary and the report show. None when there is nothing to scale."""
    ranks = setup.env.ranks
    trial, _ = chosen_trial(study)
    if ranks <= 1 or trial is None:
        return None
    knobs = trial_attrs(trial)["knobs"]
    window = figure_only(setup.window)
    together = TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                            window=window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                            env=setup.trial_env, grad_accum=setup.grad_accum(knobs),
                            launch=setup.ranks, comm=False)
    sides = {"ranks": together, "one_rank": _one_rank(setup, together)}
    figures: dict[str, list[float | None]] = {"ranks": [], "one_rank": []}
    failures: list[str] = []
    detail("scaling: trial %d as %d ranks and as one rank, %d interleaved rounds",
             trial.number, ranks, rounds)
    for r in range(rounds):
        for side in random.sample(list(sides), len(sides)):
            res = run_window(sides[side], setup.out_dir / "scaling" / f"{side}-{r}",
                             stop_requested=lambda: stop.reason if stop else None)
            figures[side].append(res.rate if res.ok else None)
            if not res.ok:
                failures.append(f"{side} round {r}: {res.outcome}: {res.error}")
    ideal = [None if one is None else ranks * one for one in figures["one_rank"]]
    interval = paired_speedup(figures["ranks"], ideal)
    record = {"trial": trial.number, "ranks": ranks, "unit": trial_attrs(trial).get("unit"),
              "all_ranks": figures["ranks"], "one_rank": figures["one_rank"],
              "one_rank_cores": sides["one_rank"].env.get(CPUS_ENV),
              "efficiency": interval.as_dict(), "failures": failures,
              "words": scaling_words(ranks, interval)}
    set_study_attrs(study, {"scaling": record})
    log.info("%s", record["words"])
    return record


def scaling_words(ranks: int, interval: Interval) -> str:
    """The efficiency in words, as the summary and the report print it."""
    if not interval.rounds:
        return f"scaling: no round measured both {ranks} ranks and one rank (see the log)"
    spread = (f"95% CI {interval.low:.0%}-{interval.high:.0%}, " if interval.known
              else "too few rounds for an interval, ")
    return (f"scaling efficiency {interval.point:.0%} ({spread}{interval.rounds} rounds): "
            f"{ranks} ranks against {ranks} x one rank alone with the same per-rank "
            "configuration")
