"""How long a confirmation runs is said before it starts, from how much its rounds vary."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

import pytest

from autotune.core.env import Env
from autotune.results.intervals import t975
from autotune.search.confirmation.words import MAX_ROUNDS, round_words
from autotune.search.round_spread import (
    DEVICE_SPREAD,
    RoundSpread,
    expected_rounds,
    measured_spread,
    round_spread,
)
from tests.conftest import study_setup

# The README's CPU study on this project's VM (2026-11-28): 10 rounds, stopped on the budget.
_CPU_CONF: dict[str, Any] = {
    "baseline_trial": 0,
    "runs": {"0": [120.0, 100.0, 130.0, 110.0, 125.0, 104.0],
             "5": [260.0, 250.0, 240.0, 270.0, 230.0, 262.0],
             "6": [250.0, None, 262.0, 236.0, 264.0, 231.0]},
}


def _logs(conf: dict[str, Any], n: str) -> list[float]:
    base = conf["runs"]["0"]
    return [math.log(a / b) for a, b in zip(conf["runs"][n], base, strict=True) if a and b]


def test_the_spread_is_the_widest_finalists_log_ratios_over_the_rounds() -> None:
    """Each finalist's log ratio over the baseline in the same round (a failed window's round
    left out); the widest finalist decides how long the rounds go on."""
    widest = max(statistics.stdev(_logs(_CPU_CONF, n)) for n in ("5", "6"))
    assert measured_spread(_CPU_CONF) == pytest.approx(widest)
    # A finalist dropped after 3 rounds for falling behind did not set how long they ran.
    dropped = {**_CPU_CONF, "runs": {**_CPU_CONF["runs"], "7": [50.0, 200.0, 90.0]}}
    assert measured_spread(dropped) == pytest.approx(widest)
    assert measured_spread({**dropped, "runs": {"0": _CPU_CONF["runs"]["0"],
                                               "7": [50.0, 200.0, 90.0]}}) > widest
    short = {"baseline_trial": 0, "runs": {"0": [1.0, 2.0], "5": [2.0, 3.0]}}
    assert measured_spread(short) is None  # an interval needs 3 rounds
    assert measured_spread(None) is None and measured_spread({"runs": {}}) is None


def test_an_earlier_confirmation_on_this_device_sets_the_spread(cpu_env: Env) -> None:
    """A nightly study's night before measured the rounds on this machine: its spread is used
    and named; one measured on another device is not, and then the device kind's figure is."""
    here = {"device": {"device_name": cpu_env.device_name}, "confirmation": _CPU_CONF}
    there = {"device": {"device_name": "NVIDIA H100 80GB HBM3"}, "confirmation": _CPU_CONF}
    got = round_spread("cpu", cpu_env.device_name, [("study 'b'", there), ("study 'a'", here)])
    assert got.spread == pytest.approx(measured_spread(_CPU_CONF))
    assert got.source == "measured by the confirmation of study 'a'"
    none = round_spread("cpu", cpu_env.device_name, [("study 'b'", there)])
    assert none.spread == DEVICE_SPREAD["cpu"] and "no earlier confirmation" in none.source
    assert round_spread("cuda", "NVIDIA H100 80GB HBM3").spread == DEVICE_SPREAD["cuda"]
    assert "+-16%" in none.words()


def test_the_rounds_expected_reach_the_precision_at_that_spread() -> None:
    """n rounds of spread s give a t interval of +-t975(n-1) s / sqrt(n): the rounds expected
    are the first n where that is within the precision, never fewer than asked, never more
    than the rounds allow."""
    n = expected_rounds(0.11, 0.05, 6)
    assert t975(n - 1) * 0.11 / math.sqrt(n) <= 0.05 < t975(n - 2) * 0.11 / math.sqrt(n - 1)
    assert expected_rounds(0.01, 0.05, 3) == 3 and expected_rounds(0.01, 0.05, 6) == 6
    assert expected_rounds(0.5, 0.05, 3) == MAX_ROUNDS
    assert expected_rounds(0.5, 0.05, 40) == 40  # study.confirm_runs=40 run all 40


def test_the_estimate_counts_the_rounds_the_spread_needs_up_to_the_budget(
        cpu_env: Env) -> None:
    """The README's CPU study was estimated at its 6 trusted rounds (~70 s) and ran its whole
    300 s budget: at a CPU's spread the estimate is the budget, and says so; at a quiet
    spread it is the rounds the selection takes at that spread (confirm.selection_rounds),
    the first of them the search's own windows."""
    from autotune.search.confirmation.confirm import selection_rounds
    from autotune.search.confirmation.selection import Selection
    from autotune.search.console.estimate import estimate
    from autotune.search.setup import StudySetup

    def setup(spread: float) -> StudySetup:
        return dataclasses.replace(
            study_setup(cpu_env, confirm_top=3, confirm_budget_s=300.0, numerics_steps=0),
            round_spread=RoundSpread(spread, "a test"))

    first = {"extras_s": 1.0, "ceiling_noise": {"window": 0.2}}
    noisy = estimate(setup(0.11), 12, 3, 0.0, 8.5, first)  # 4 windows of 7.5 s: 30 s a round
    assert noisy.confirm_s == pytest.approx(300.0)
    assert noisy.confirm_rounds == selection_rounds(0.11, Selection(0.05, 0.95, 3, 0.2), 3) > 10
    assert "confirmation ~300 s (the budget: " in noisy.words(), noisy.words()
    assert "at rounds spread +-11% (a test)" in noisy.words()
    assert noisy.as_dict()["round_spread"] == {"spread": 0.11, "source": "a test"}
    quiet = estimate(setup(0.01), 12, 3, 0.0, 8.5, {**first, "ceiling_noise": {"window": 0.005}})
    assert quiet.confirm_rounds == 3 and quiet.confirm_s == pytest.approx(90.0)
    assert ("confirmation ~90 s (3 rounds of ~30 s at rounds spread +-1%"
            in quiet.words()), quiet.words()


def test_the_rounds_cost_says_what_the_spread_expects() -> None:
    """Said as the confirmation starts: the least rounds, then the rounds the selection may
    take at the spread, and the budget where it ends them first."""
    cut = round_words(30, 3, 300, 17, "rounds spread +-11% (x)")
    assert "would take ~17 rounds at rounds spread +-11% (x), ~510s: the budget (300s)" in cut
    fits = round_words(10, 3, 300, 17, "rounds spread +-11% (x)")
    assert "at most ~17 rounds, ~170s, at rounds spread +-11% (x)" in fits, fits
    assert round_words(10, 3, 300).endswith("rounds it needs at least")


def test_a_reference_run_is_counted_at_the_baselines_numerics_at_the_finalists_batch(
        cpu_env: Env) -> None:
    """The numerics check trains each reference (your numerics at the finalist's batch size)
    at the finalist's seed, the next seeds only where the finalist lies beyond the one-seed
    bound (not foreseen): its steps are the baseline's scaled to that batch, not the
    finalist's bf16 ones."""
    import optuna

    from autotune.core.space import build_space
    from autotune.search.console.numerics_cost import check_cost_s
    from autotune.workloads.mlp import MLPWorkload

    space = build_space(cpu_env, MLPWorkload(), {})
    setup = study_setup(cpu_env, space, confirm_top=1, numerics_steps=10)
    base_knobs = {**space.baseline, "batch_size": 32}

    def trial(knobs: dict[str, Any], step_ms: float) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(value=1.0, user_attrs={
            "knobs": knobs, "step_ms": {"median": step_ms}, "wall_s": 10.0, "extras_s": 2.0,
            "warmup_s": 1.2, "measure_s": 4.0})

    base = trial(base_knobs, 250.0)
    fast = trial({**base_knobs, "batch_size": 128, "amp": "bf16"}, 400.0)
    # The finalist's run: 2.8 s of start-up (its figure window less warm-up and measurement)
    # and 10 steps of 0.4 s; its reference at its seed, at 10 steps of 4 x 0.25 s.
    assert check_cost_s(setup, [fast], base) == pytest.approx(6.8 + (2.8 + 10.0))
    # Your own numerics at that batch size is its own reference: nothing is run.
    assert check_cost_s(setup, [trial({**base_knobs, "batch_size": 128}, 900.0)], base) == 0.0
