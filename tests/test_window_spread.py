"""A window's own noise (measure/figures.window_spread): what the selection's first stage and
floor (as a window's deviation: selection.window_sd) and the search's best-trial rule read."""

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


def test_a_window_of_four_timed_steps_has_a_noise_its_halves_measure() -> None:
    """Steps 1-2 against steps 3-4: 2 steps in 200 ms against 2 in 300 ms."""
    assert window_spread(_loop([100, 100, 150, 150]), CPU, 8) == pytest.approx(
        abs(2 / 200 - 2 / 300) / ((2 / 200 + 2 / 300) / 2))
    assert window_spread(_loop([100, 100, 100, 100]), CPU, 8) == pytest.approx(0.0)


def test_a_cpus_four_step_window_is_too_short_to_split() -> None:
    """Three timed steps (a CPU's least window, 4 steps: the first has no duration) split 2
    against 1 read one slow step as the window's noise: a GPT study's baseline window read 98%
    that way, and the search then held a trial 9% faster than its best as within the noise."""
    assert window_spread(_loop([100, 100, 200]), CPU, 8) == 0.0
    assert window_spread(_loop([100, 125]), CPU, 8) == 0.0


def test_the_halves_are_weighted_by_each_steps_units() -> None:
    """Token windows count each step's own units: a step of twice the tokens in the same time
    is twice the rate."""
    loop = _loop([100, 100, 100, 100])
    loop.units = [0.0, 10.0, 10.0, 20.0, 20.0]
    assert window_spread(loop, CPU, 8) == pytest.approx(abs(20 / 200 - 40 / 200) / (30 / 200))


@pytest.mark.parametrize("steps", [4, 16])
def test_the_selection_reads_the_halves_as_the_windows_own_deviation(steps: int) -> None:
    """Windows of independent steps (4% per step): the median of their halves' difference over
    HALVES_PER_SD is the spread of the windows' own rates (what the selection's floor and the
    forecast's prior take it for), within a few percent, for the shortest window split (4
    timed steps) and a 17-step one. Read as the deviation itself, the halves stood 1.35x
    high."""
    import random
    import statistics

    from autotune.search.confirmation.selection import window_sd

    rng = random.Random(5)
    halves, rates = [], []
    for _ in range(4000):
        loop = _loop([100 * (1 + rng.gauss(0, 0.04)) for _ in range(steps)])
        halves.append(window_spread(loop, CPU, 8))
        rates.append(steps / (loop.marks[-1][3] - loop.marks[0][3]))
    own = statistics.stdev(rates) / statistics.fmean(rates)
    assert window_sd(statistics.median(halves)) == pytest.approx(own, rel=0.1)
