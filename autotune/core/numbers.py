"""Reading numbers from records that crossed JSON (a WindowResult, a trace, a stored study):
NaN and infinity arrive as strings or floats, a flag as a bool; evidence is a finite number or
nothing."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> float | None:
    """``value`` as a finite float; None for a bool, a non-number, NaN or infinity."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def rounded(value: Any, digits: int = 4) -> float | None:
    """A figure as exports write it: finite, rounded; None when it is not a number."""
    out = finite(value)
    return None if out is None else round(out, digits)
