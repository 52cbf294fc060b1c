"""Student's t quantiles at the levels the selection reads them (results/intervals.t_quantile):
checked against the t density integrated numerically, not against a second formula."""

from __future__ import annotations

import math

import pytest

from autotune.results.intervals import t975, t_quantile

#: The selection's levels, 1 - alpha/(k-1) at alpha = 0.05 for k = 2..10, and the tails beyond.
LEVELS = (*[1 - 0.05 / (k - 1) for k in range(2, 11)], 0.995, 0.999, 0.9999)


def _below(q: float, df: int, panels: int = 4000) -> float:
    """P(0 <= T <= q) by Simpson's rule on the t density, in theta = atan(t / sqrt(df)) (there
    the integrand, c * sqrt(df) * cos(theta)^(df-1), is smooth over a finite range)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    end = math.atan(q / math.sqrt(df))
    h = end / panels

    def g(theta: float) -> float:
        return c * math.sqrt(df) * math.cos(theta) ** (df - 1)

    odd = sum(g((2 * i - 1) * h) for i in range(1, panels // 2 + 1))
    even = sum(g(2 * i * h) for i in range(1, panels // 2))
    return h / 3 * (g(0.0) + 4 * odd + 2 * even + g(end))


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 6, 9, 14, 29, 60])
def test_the_quantile_leaves_the_stated_tail(df: int) -> None:
    """At every level the selection uses, the quantile's tail above is 1 - p to 1e-9 of the
    integrated density: the first stage's 2 degrees of freedom included, where the
    Cornish-Fisher expansion once used was 1.7% low at k = 5 and 3.8% at k = 10."""
    for p in LEVELS:
        q = t_quantile(p, df)
        assert _below(q, df) == pytest.approx(p - 0.5, abs=1e-9), (p, df)
        assert t_quantile(1 - p, df) == pytest.approx(-q)


def test_closed_forms_and_the_table_agree() -> None:
    """1 and 2 degrees of freedom in closed form; the 95% table within its 3 decimals."""
    assert t_quantile(0.975, 1) == pytest.approx(12.7062047, rel=1e-7)
    assert t_quantile(0.995, 2) == pytest.approx(9.9248432, rel=1e-7)
    assert all(abs(t_quantile(0.975, f) - t975(f)) < 6e-4 for f in range(1, 31))
    assert t975(40) == pytest.approx(2.0210754, rel=1e-6)  # not the normal's 1.960
    with pytest.raises(ValueError, match="p=1"):
        t_quantile(1.0, 3)
