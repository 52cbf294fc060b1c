"""The numerics check's yardstick: how much the user's own configuration differs from itself.

A configuration "trains like mine" when it stays within what another seed of the user's own
run would do. MLPerf Training counts a result as converged within the spread of several
seeds of the reference (https://github.com/mlcommons/training_policies, "Run results"); NVIDIA's
mixed-precision guidance compares training curves, not single steps
(https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/); Megatron-LM's
functional tests compare the loss over many iterations with golden values within a
tolerance. So the user's configuration runs at ``REFERENCE_SEEDS`` seeds (another
initialization and data order, nothing a user cares about), each run is summed up by its loss
over the last half of its steps (``tail_loss``: training, not one step of a chaotic
trajectory), and a finalist is judged by how far its own tail loss lies from those runs'
mean, against their spread.

Step by step, two runs of a recipe whose first steps are chaotic (SGD at lr 0.1 with
momentum 0.9 on a ResNet-18: its fp32 loss went from 2.38 to 13.5 within 10 steps) differ by
hundreds of percent with nothing but the last bits changed; their tail losses differ by what
another seed gives, and so does a bf16 run's. A configuration that breaks the arithmetic (a
cast that rounds the logits away, a loss that overflows) leaves that spread, or goes
non-finite.

Pure: losses in, figures out (search/checks/numerics.py runs the windows).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Runs of the user's own configuration, at the study's seed and the next ones: enough for a
#: spread (two runs give one difference), few enough that the check stays a few windows.
REFERENCE_SEEDS = 3
#: A finalist may lie this many times the references' own spread from their mean. With three
#: references the largest distance from their mean is about one standard deviation of a run
#: (0.85-1.1), and a fourth run of the same configuration, whose distance from their mean has
#: 1.15 of it, lies beyond three of it in about 1% of cases on normal figures; more where the
#: three happened to agree closely, which the finalist's second seed guards against
#: (search/checks/numerics.py).
NOISE_MULTIPLE = 3.0


def one_seed_bound(floor: float) -> float:
    """How far (relative) a finalist's tail loss may lie from the user's run at the same seed
    for the verdict to be a pass whatever the user's runs at the other seeds read.

    The full verdict passes when ``|f - m| <= max(floor |m|, NOISE_MULTIPLE w)``, ``m`` the
    runs' mean and ``w`` their largest distance from it, so ``w >= |r0 - m| = |e|`` for the
    first run ``r0``. With ``d = |f - r0|``: where ``|e| >= d / (M - 1)``, ``|f - m| <= d + |e|
    <= M |e| <= M w``; else ``|f - m| < d M / (M - 1)`` and ``|m| > |r0| - d / (M - 1)``, and
    the floor holds it once ``d <= floor |r0| (M - 1) / (M + floor)``: 6.45% of the first run
    at AMP's 10%, 3.28% at the default 5%. Any finite runs at the next seeds then give a pass,
    so they need not be run: where the user's fp32 run took 8x the bf16 finalist's (a GPT at
    batch 64 on this project's CPU, 146 s against 18 s, 2026-12-07) they were most of the
    check's time."""
    multiple = NOISE_MULTIPLE
    return floor * (multiple - 1.0) / (multiple + floor)


def passes_on_one_seed(losses: Sequence[float], first: Sequence[float], floor: float) -> bool:
    """Whether the finalist's run passes against the user's run at its seed alone
    (``one_seed_bound``): finite, and within the bound of that run's tail loss."""
    if not (finite(losses) and finite(first)):
        return False
    ref = tail_loss(first)
    return abs(tail_loss(losses) - ref) <= one_seed_bound(floor) * abs(ref)


def tail_steps(steps: int) -> int:
    """How many of the last steps the comparison averages: the last half, at least one."""
    return max(1, steps // 2)


def tail_loss(losses: Sequence[float]) -> float:
    """The mean loss over the last half of the steps: where the run has trained a little, and
    smoothed over a few steps so that one step's luck does not decide."""
    tail = list(losses)[-tail_steps(len(losses)):]
    return statistics.fmean(tail) if tail else math.nan


def finite(losses: Sequence[float]) -> bool:
    return bool(losses) and all(math.isfinite(v) for v in losses)


@dataclass(frozen=True)
class Spread:
    """The user's configuration at several seeds: each run's tail loss."""

    tails: tuple[float, ...]
    seeds: tuple[int, ...]

    @property
    def center(self) -> float:
        return statistics.fmean(self.tails)

    @property
    def width(self) -> float:
        """The largest distance of one run's tail loss from their mean."""
        return max(abs(t - self.center) for t in self.tails)

    @property
    def relative(self) -> float:
        """The width as a share of the mean: the user's own seed-to-seed spread."""
        return self.width / max(abs(self.center), 1e-12)

    def tolerance(self, floor: float) -> float:
        """How far a finalist's tail loss may lie from the mean, relative: NOISE_MULTIPLE
        times the spread, at least ``floor`` (the knob family's, study.numerics_tolerance)."""
        return max(floor, NOISE_MULTIPLE * self.relative)

    def deviation(self, losses: Sequence[float]) -> float:
        """How far a run's tail loss lies from the references' mean, relative."""
        return abs(tail_loss(losses) - self.center) / max(abs(self.center), 1e-12)

    def words(self) -> str:
        """"2.91 +-0.20 (6.8%) at seeds 0, 1, 2"."""
        return (f"{self.center:.4g} +-{self.width:.2g} ({self.relative:.1%}) at seeds "
                f"{', '.join(map(str, self.seeds))}")

    def as_dict(self) -> dict[str, Any]:
        return {"tails": [round(t, 6) for t in self.tails], "seeds": list(self.seeds),
                "center": round(self.center, 6), "spread": round(self.relative, 6)}


def step_deviation(losses: Sequence[float], reference: Sequence[float]) -> float:
    """Largest relative loss difference step by step over the steps both runs have: what the
    check judged by before it judged by the spread, kept as information (a large figure with
    a small tail deviation says the recipe's first steps are chaotic)."""
    devs = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=False)]
    return max(devs) if devs else math.inf
