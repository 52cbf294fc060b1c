"""How much the confirmation's rounds will vary, said before they run.

The confirmation's rounds go on until each finalist's interval is +-precision: after n rounds
whose log ratios (a finalist's window over the baseline's in the same round) spread by s, that
is t975(n-1) * s / sqrt(n). So s sets how long the confirmation takes, and nothing in the search
measures it: a search window's own spread (its two halves) does not predict it. The README's
CPU study on this project's 2-core VM (2026-11-28) had finalists whose windows read 1-22% noisy
and rounds whose log ratios spread 10.6-12.5%; its estimate, counting only the trusted floor of
rounds, said ~70 s for a confirmation that ran its whole 300 s budget (the study: 08:06 against
~03:43 expected).

So the estimate takes s from an earlier confirmation measured on the same device: this study's
own (a study run again with more trials) or the one study.start_from / study.compare_to names
(a nightly study's night before). Failing that, it takes the device kind's figure measured on
this project's machines (DEVICE_SPREAD), and says which it used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.results.intervals import MIN_ROUNDS, t975

#: However generous the budget, a confirmation ends after this many rounds (here, below the
#: confirmation's modules, because the rounds' expected count is capped by it too).
MAX_ROUNDS = 30

#: The rounds' spread (SD of the log ratio, the widest finalist's) by device kind, where no
#: earlier confirmation on this device says it: the median of the studies measured
#: (docs/benchmarks.md, "How long the confirmation runs"). CPU: this project's 2-core VM,
#: 2026-11-28: the README's study 12.5%, 18.8% and 21.9%, a gpt study 13.0% (and 33% beside
#: another load, left out); a fifth study, run after the figure was set, read 13.1%.
#: CUDA: one H100, the README's study at 224 px in the GPU checks of 2026-11-26 (3 rounds
#: each: 4.9%, 5.8%, 11.8%, 18.6%). There the finalists' rounds agreed to 1%, but the
#: baseline, its loader in the training process, is input-bound on the host and varied 8-18%:
#: a GPU study's ratios spread as a CPU's do.
DEVICE_SPREAD = {"cpu": 0.159, "cuda": 0.088}


@dataclass(frozen=True)
class RoundSpread:
    """A spread of the rounds' log ratios and where it comes from (said in the estimate)."""

    spread: float
    source: str
    measured: bool = False  # by an earlier confirmation on this device (not the device's prior)

    def words(self) -> str:
        return f"rounds spread +-{100 * self.spread:.0f}% ({self.source})"

    def as_dict(self) -> dict[str, Any]:
        return {"spread": round(self.spread, 4), "source": self.source}


def measured_spread(confirmation: Mapping[str, Any] | None) -> float | None:
    """The spread of log ratios over a stored confirmation's rounds of the finalists measured
    to its end, the widest of them (None where none has MIN_ROUNDS rounds beside the
    baseline). A finalist dropped early for falling behind does not set how long the rounds
    run: a gpt study's dropped trial 4 spread 32.5% over its 6 rounds where trial 5, measured
    through all 29, spread 13.0% (2026-11-28)."""
    if not confirmation:
        return None
    runs = confirmation.get("runs") or {}
    key = str(confirmation.get("baseline_trial"))
    base = runs.get(key)
    if not base:
        return None
    spreads = {}
    for number, vals in runs.items():
        if number == key:
            continue
        logs = [math.log(a / b) for a, b in zip(vals, base, strict=False) if a and b]
        if len(logs) >= MIN_ROUNDS:
            spreads[number] = (statistics.stdev(logs), len(vals) == len(base) and bool(vals[-1]))
    last = [sd for sd, to_the_end in spreads.values() if to_the_end]
    return max(last or [sd for sd, _ in spreads.values()], default=None)


def round_spread(device: str, device_name: str,
                 earlier: Iterable[tuple[str, Mapping[str, Any]]] = ()) -> RoundSpread:
    """The spread the estimate uses: the first of ``earlier`` (a label and a study's user
    attributes) whose confirmation ran on a device of this name, else DEVICE_SPREAD's."""
    for label, attrs in earlier:
        dev = attrs.get("device") or {}
        if dev.get("device_name") != device_name:
            continue
        spread = measured_spread(attrs.get("confirmation"))
        if spread is not None:
            return RoundSpread(spread, f"measured by the confirmation of {label}", True)
    kind = "cuda" if device == "cuda" else "cpu"
    return RoundSpread(DEVICE_SPREAD[kind],
                       f"no earlier confirmation on this {device_name}: the {kind.upper()} "
                       "figure measured for autotune")


def expected_rounds(spread: float, precision: float, least: int) -> int:
    """The rounds at which an interval of rounds this spread reaches +-precision: at least
    ``least`` (study.confirm_runs run whatever the cap), else at most MAX_ROUNDS."""
    for n in range(max(least, MIN_ROUNDS), MAX_ROUNDS + 1):
        if t975(n - 1) * spread / math.sqrt(n) <= precision:
            return n
    return max(least, MAX_ROUNDS)
