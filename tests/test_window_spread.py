"""A window's own noise (measure/figures.window_spread): what the selection's first stage and the
search's best-trial rule read. A CPU's windows may be 4 steps (window.min_measure_steps): their
noise must be known, or the selection waits 6 rounds for every study that has one."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.clock import Clock
from autotune.measure.figures import Loop, window_spread


def _loop(step_ms: list[float]) -> Loop:
    ends = [0.0]  # step 0 ends at 0: it has no duration of its own
    for ms in step_ms:
        ends.append(ends[-1] + ms / 1e3)
    marks = [(e, e, e, e) for e in ends]
    return Loop(None, marks, [0.0] * len(marks), ends[-1], 0, 0.0, 0.0)  # type: ignore[arg-type]


CPU = Clock(torch.device("cpu"))


def test_a_four_step_window_has_a_noise_its_halves_measure() -> None:
    """Steps 1-2 against step 3: 2 steps in 200 ms against 1 in 150 ms."""
    assert window_spread(_loop([100, 100, 150]), CPU, 8) == pytest.approx(
        abs(2 / 200 - 1 / 150) / ((2 / 200 + 1 / 150) / 2))
    assert window_spread(_loop([100, 100, 100]), CPU, 8) == pytest.approx(0.0)


def test_two_timed_steps_are_the_least_that_can_be_split() -> None:
    assert window_spread(_loop([100, 125]), CPU, 8) == pytest.approx(
        abs(1 / 100 - 1 / 125) / ((1 / 100 + 1 / 125) / 2))
    assert window_spread(_loop([100]), CPU, 8) == 0.0  # one timed step: unknown


def test_the_halves_are_weighted_by_each_steps_units() -> None:
    """Token windows count each step's own units: a step of twice the tokens in the same time
    is twice the rate."""
    loop = _loop([100, 100, 100, 100])
    loop.units = [0.0, 10.0, 10.0, 20.0, 20.0]
    assert window_spread(loop, CPU, 8) == pytest.approx(abs(20 / 200 - 40 / 200) / (30 / 200))
