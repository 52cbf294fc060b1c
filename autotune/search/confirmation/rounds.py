"""The rounds: what one round of the confirmation (or of the search's race) runs, and what the
rounds keep.

A round measures each configuration in its order once, as a figure-only window
(measure/protocol.figure_only: no profile, loader profile or all-reduce probe), and records
its figure, whether the window was contended, and the round's wall time. ``Rounds`` keeps the
lists aligned by round (None where a configuration sat a round out or its window failed), which
is what the paired intervals (choose.interval_of) need; it travels in the study's attributes,
so the search's race hands its rounds to the confirmation (``raced``).

The finalists' own search windows are no round: they made the finalists (each a finalist
because its window read high) and ran minutes apart, not interleaved, so they only order the
finalists (search/confirmation/selection.py says what the simulation measured of them).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.measure.protocol import TrialRequest, WindowResult, figure_only
from autotune.results.record import study_attrs, trial_attrs
from autotune.search.setup import StopFlag, StudySetup


def request(setup: StudySetup, knobs: dict[str, Any]) -> TrialRequest:
    # A confirmation window is only a figure: no profile, loader profile or all-reduce probe.
    window = figure_only(setup.window)
    return TrialRequest(workload=setup.workload_spec, knobs=knobs, device=setup.env.device,
                        window=window, seed=setup.seed, cpu_sized=setup.cpu_sized,
                        env=setup.trial_env, grad_accum=setup.grad_accum(knobs),
                        launch=setup.ranks, comm=False)


@dataclass
class Rounds:
    """The rounds so far: per trial, one figure per round (None: the window failed) and
    whether that window was contended."""

    numbers: list[int]
    runs: dict[int, list[float | None]] = field(default_factory=dict)
    contended: dict[int, list[bool]] = field(default_factory=dict)
    loads: list[dict[str, Any]] = field(default_factory=list)
    order: list[list[int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # each round's windows' wall time

    def __post_init__(self) -> None:
        for n in self.numbers:
            self.runs.setdefault(n, [])
            self.contended.setdefault(n, [])

    def add(self, n: int, figure: float | None, result: WindowResult) -> None:
        self.runs[n].append(figure)
        self.contended[n].append(bool(result.contention.get("contended")))
        if result.contention:
            self.loads.append(result.contention)

    def join(self, n: int) -> None:
        """``n`` takes part from the next round on: the rounds before it are None, so that
        every list stays aligned by round (interval_of pairs by round)."""
        if n not in self.runs:
            self.runs[n] = [None] * len(self.order)
            self.contended[n] = [False] * len(self.order)

    def sat_out(self) -> None:
        """After a round: None for everyone who was not in it."""
        for n, vals in self.runs.items():
            if len(vals) < len(self.order):
                vals.append(None)
                self.contended[n].append(False)

    def paired(self, n: int, base: int) -> int:
        """The rounds in which ``n`` and the baseline were both measured."""
        return sum(1 for c, b in zip(self.runs[n], self.runs[base], strict=False) if c and b)

    def only(self, keep: Collection[int]) -> Rounds:
        """These rounds for ``keep`` alone (the search's race rounds, for the finalists left)."""
        order = [[n for n in o if n in keep] for o in self.order]
        return Rounds([n for n in self.runs if n in keep],
                      runs={n: v for n, v in self.runs.items() if n in keep},
                      contended={n: v for n, v in self.contended.items() if n in keep},
                      loads=list(self.loads), order=order, failures=list(self.failures),
                      seconds=list(self.seconds))

    def as_dict(self) -> dict[str, Any]:
        return {"runs": {str(n): v for n, v in self.runs.items()},
                "contended": {str(n): v for n, v in self.contended.items()},
                "loads": [compact_load(c) for c in self.loads], "order": self.order,
                "failures": self.failures, "seconds": [round(s, 2) for s in self.seconds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rounds:
        runs = {int(n): list(v) for n, v in (d.get("runs") or {}).items()}
        return cls(list(runs), runs=runs,
                   contended={int(n): list(v) for n, v in (d.get("contended") or {}).items()},
                   loads=list(d.get("loads") or []), order=[list(o) for o in d.get("order") or []],
                   failures=list(d.get("failures") or []),
                   seconds=[float(s) for s in d.get("seconds") or []])


def raced(study: optuna.Study) -> tuple[Rounds, set[int]]:
    """The rounds the search's race ran, and the contenders it dropped (none: empty)."""
    race = study_attrs(study).get("race") or {}
    return Rounds.from_dict(race), {int(n) for n in race.get("dropped") or []}


def figure_window_s(t: FrozenTrial) -> float:
    """A trial's search window as a figure-only window (figure_only: a confirmation, numerics
    or scaling run) has it: its wall time less its ``extras_s``."""
    a = trial_attrs(t)
    return max(0.0, float(a.get("wall_s") or 0.0) - float(a.get("extras_s") or 0.0))


def expected_round_s(trials: Collection[FrozenTrial]) -> float:
    """A round's time from its configurations' own search windows. The finalists are often the
    bigger batches, whose warm-up and measured steps take longer than the baseline's: the
    README's CPU study as 2 ranks paid 26 s for the baseline's window and 63 s for its
    batch-128 finalist's (2026-11-27)."""
    return sum(figure_window_s(t) for t in trials)


def run_round(setup: StudySetup, trials: dict[int, FrozenTrial], order: list[int], rounds: Rounds,
              stop: StopFlag | None, run: Callable[..., WindowResult]) -> None:
    """One round: each trial in ``order`` measured once, its figure (None: the window failed)
    and load added to ``rounds``; those not in the round sit it out."""
    i = len(rounds.order)
    seconds = 0.0  # the round's windows' own wall time (a served window's, in a benchmark)
    for n in order:
        knobs = trial_attrs(trials[n])["knobs"]
        res = run(request(setup, knobs), setup.out_dir / "confirm" / f"{i}-{n}",
                  stop_requested=lambda: stop.reason if stop else None)
        if res.ok:
            rounds.add(n, setup.objective(res, knobs), res)
        else:
            rounds.add(n, None, res)
            rounds.failures.append(f"trial {n} round {i}: {res.outcome}: {res.error}")
        seconds += res.wall_s
    rounds.order.append(order)
    rounds.seconds.append(seconds)
    rounds.sat_out()


def load_summary(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """The confirmation windows' load: how many were contended and what others used."""
    busy = [c for c in loads if c.get("contended")]
    others = [float(c.get("other_cpu_cores") or 0.0) for c in busy]
    return {"windows": len(loads), "contended": len(busy),
            "other_cpu_cores": round(statistics.fmean(others), 2) if others else 0.0,
            "cpus": max((int(c.get("cpus") or 0) for c in loads), default=0)}


def compact_load(c: dict[str, Any]) -> dict[str, Any]:
    """A window's load as the study keeps it (results/trust.py reads these)."""
    keys = ("contended", "cpus", "other_cpu_cores", "runqueue_wait_share", "steal_share",
            "throttled_share", "reasons")
    return {k: c[k] for k in keys if k in c}
