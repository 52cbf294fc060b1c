"""How sure a speedup is: paired rounds → a ratio with a 95% confidence interval.

A comparison on a shared machine is run as rounds: in each round the candidate and the
baseline are measured once, in random order (Abedi and Brecht, ICPE 2017: randomized multiple
interleaved trials), so whatever the machine does over minutes hits both alike and cancels in
the round's ratio. The speedup is the geometric mean of the rounds' ratios; its interval is a
Student-t interval on the log ratios. Why t and not a bootstrap: confirmation stops after as
few as 3 rounds, where a percentile bootstrap's interval is known to be too narrow (it can
never be wider than the rounds' own range); t on log ratios is exact for log-normal timing
noise and honest at small n. One definition for confirmation (search/confirmation/confirm.py) and for
production parity (``autotune verify``).

Which rounds count in a comparison is decided here too, once (``counted_rounds``): a round
whose window on either side ran beside other work is the machine's, not the configurations',
and every comparison (a finalist over the baseline, one finalist over another) reads the same
rule. Before it lived here, each finalist's interval left such rounds out while the paired
comparison of two finalists took every round: in a 12-trial README study one disturbed round
(trial 5 at 1.15x, "counted") pulled trial 5's paired ratio over trial 4 into a tie, and trial
4 was exported, its interval wholly below trial 5's (2026-12-01).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Student's t, two-sided 95% (0.975 quantile), by degrees of freedom 1..30; beyond, normal.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

#: Rounds below which no interval is stated (two ratios cannot estimate their own spread).
MIN_ROUNDS = 3


def t975(df: int) -> float:
    """Student's t at 0.975 (the 95% interval's): the table to 30 degrees of freedom, the exact
    quantile beyond (the normal's 1.960 was 2-4% low from 31 to 60)."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else t_quantile(0.975, max(1, df))


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at ``p`` for ``df`` (whole) degrees of freedom, exact: in closed form
    at 1 and 2, else the root of the exact distribution function (``_t_two_sided``) by Newton's
    method kept inside a bracket. The selection reads it at 1 - alpha/(k-1) (0.9875 at k = 5,
    0.99375 at k = 9, before halving) and 2 degrees of freedom from its first stage, where the
    Cornish-Fisher expansion used until 2026-12-03 was 1.7-3.8% low (tests/test_t_quantile.py
    checks this against the density integrated numerically)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p={p} must lie strictly between 0 and 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    f = max(1, int(df))
    if f == 1:
        return math.tan(math.pi * (p - 0.5))
    if f == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    target, t = 2 * p - 1, _cornish_fisher(p, f)
    lo, hi = 0.0, math.inf
    for _ in range(200):
        gap = _t_two_sided(t, f) - target
        if gap == 0:
            return t
        lo, hi = (t, hi) if gap < 0 else (lo, t)
        nxt = t - gap / (2 * _t_density(t, f))
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2 if math.isfinite(hi) else 2 * t
        if abs(nxt - t) <= 1e-15 * max(1.0, t):
            return nxt
        t = nxt
    return t


def _cornish_fisher(p: float, f: int) -> float:
    """The Cornish-Fisher expansion about the normal's quantile (Abramowitz and Stegun 26.7.5):
    Newton's starting point."""
    z = statistics.NormalDist().inv_cdf(p)
    g = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
         (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
         (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(gi / f ** (i + 1) for i, gi in enumerate(g))


def _t_two_sided(t: float, f: int) -> float:
    """P(|T| <= t) for whole ``f``, in closed form (Abramowitz and Stegun 26.7.3-4): with
    theta = atan(t / sqrt(f)), a finite series in cos(theta)."""
    theta = math.atan(t / math.sqrt(f))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if f % 2 == 0:  # sin(theta) [1 + 1/2 cos^2 + (1*3)/(2*4) cos^4 + ...], to cos^(f-2)
        term, total = 1.0, 1.0
        for j in range(2, f, 2):
            term *= c2 * (j - 1) / j
            total += term
        return s * total
    term, total = math.cos(theta), 0.0  # odd: 2/pi [theta + sin cos (1 + 2/3 cos^2 + ...)]
    if f > 1:
        total = term
        for j in range(3, f - 1, 2):
            term *= c2 * (j - 1) / j
            total += term
    return 2 / math.pi * (theta + s * total)


def _t_density(t: float, f: int) -> float:
    log_c = math.lgamma((f + 1) / 2) - math.lgamma(f / 2) - 0.5 * math.log(f * math.pi)
    return math.exp(log_c - (f + 1) / 2 * math.log1p(t * t / f))


def mean_variance(xs: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample variance (0 for one value), in floats, two passes: the
    statistics module's exact fractions took most of a simulated confirmation's time
    (search/confirmation/simulate.py), for the same figures to 1e-15."""
    n = len(xs)
    mean = math.fsum(xs) / n
    return mean, (math.fsum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0)


@dataclass(frozen=True)
class Interval:
    """A speedup (candidate over baseline) with its 95% interval over ``rounds`` paired rounds.
    ``low``/``high`` are 0 and inf below MIN_ROUNDS: nothing is known about the spread yet."""

    point: float
    low: float
    high: float
    rounds: int

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the point: ±5% is 0.05."""
        if not math.isfinite(self.high) or self.point <= 0:
            return math.inf
        return (self.high - self.low) / 2 / self.point

    @property
    def known(self) -> bool:
        return math.isfinite(self.high)

    def above(self, value: float = 1.0) -> bool:
        """Whether the whole interval lies above ``value``: a speedup the data support."""
        return self.known and self.low > value

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def text(self) -> str:
        """"1.38x, 95% CI 1.31-1.45x, 6 rounds" (the words best.yaml, the summary and the
        report all use)."""
        if not self.known:
            return f"{self.point:.2f}x ({self.rounds} round(s): too few for an interval)"
        return f"{self.point:.2f}x, 95% CI {self.low:.2f}-{self.high:.2f}x, {self.rounds} rounds"

    def as_dict(self) -> dict[str, float | int | None]:
        return {"speedup": round(self.point, 3),
                "ci_low": round(self.low, 3) if self.known else None,
                "ci_high": round(self.high, 3) if self.known else None,
                "rounds": self.rounds}


def counted_rounds(a: Sequence[float | None], b: Sequence[float | None],
                   busy_a: Sequence[bool] = (), busy_b: Sequence[bool] = (),
                   least: int = MIN_ROUNDS) -> tuple[list[int], bool]:
    """The rounds that count in a comparison of ``a`` with ``b`` (each a figure per round, None
    where not measured; ``busy_*``: whether that window ran beside other work), and whether
    they are all quiet. A round counts where both were measured; one with a contended window
    on either side is left out while at least ``least`` quiet ones remain. With fewer, every
    measured round counts and the second value is False: an interval then says what the
    machine gave beside its load (results/trust.py names it), and a decision between
    configurations waits for more rounds (search/confirmation/selection.py), which is how a
    disturbed round is measured again."""
    both = [i for i, (x, y) in enumerate(zip(a, b, strict=False))
            if x and y and x > 0 and y > 0]
    na, nb = len(busy_a), len(busy_b)
    quiet = [i for i in both if not ((i < na and busy_a[i]) or (i < nb and busy_b[i]))]
    if len(quiet) >= least:
        return quiet, True
    return both, len(quiet) == len(both)


def compared(a: Sequence[float | None], b: Sequence[float | None],
             busy_a: Sequence[bool] = (), busy_b: Sequence[bool] = ()) -> Interval:
    """``a``'s speedup over ``b`` over the rounds that count (``counted_rounds``)."""
    idx, _ = counted_rounds(a, b, busy_a, busy_b)
    return paired_speedup([a[i] for i in idx], [b[i] for i in idx])


def paired_speedup(candidate: Sequence[float | None],
                   baseline: Sequence[float | None]) -> Interval:
    """The candidate's speedup over the baseline from rounds measured side by side:
    ``candidate[i]`` and ``baseline[i]`` are throughputs of the same round (pairs where either
    is missing or not positive are dropped)."""
    logs = [math.log(c / b) for c, b in zip(candidate, baseline, strict=False)
            if c and b and c > 0 and b > 0]
    n = len(logs)
    if n == 0:
        return Interval(math.nan, 0.0, math.inf, 0)
    mean, var = mean_variance(logs)
    if n < MIN_ROUNDS:
        return Interval(math.exp(mean), 0.0, math.inf, n)
    half = t975(n - 1) * math.sqrt(var) / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n)

