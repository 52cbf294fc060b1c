"""Two ways a confirmation's interval could be optimistic, read from stored studies.

- The winner's curse: picking the winner from the same rounds that estimate it. Pick the
  fastest finalist on a random half of the rounds every finalist ran in, estimate it on the
  other half; the mean ratio of the two estimates over 200 splits (1.00: no curse).
- Drift inside the confirmation: the lag-1 autocorrelation of each finalist's log ratios
  over its rounds (a Student-t interval assumes them independent: near 0).

    python benchmarks/confirmation_bias.py /tmp/bench/busy5/idle-*/best.yaml
"""

from __future__ import annotations

import math
import random
import statistics
import sys

import yaml


def curse(conf: dict) -> float | None:
    runs = {int(k): v for k, v in conf["runs"].items()}
    base = runs[conf["baseline_trial"]]
    fins = [t for t in conf["finalists"] if t != conf["baseline_trial"]]
    full = [i for i in range(conf["rounds"])
            if base[i] and all(i < len(runs[t]) and runs[t][i] for t in fins)]
    if len(full) < 4 or len(fins) < 2:
        return None

    def est(t: int, idx: list[int]) -> float:
        return math.exp(statistics.fmean(math.log(runs[t][i] / base[i]) for i in idx))

    rng, ratios = random.Random(0), []
    for _ in range(200):
        rng.shuffle(full)
        a, b = full[:len(full) // 2], full[len(full) // 2:]
        w = max(fins, key=lambda t: est(t, a))
        ratios.append(est(w, a) / est(w, b))
    return statistics.fmean(ratios)


def lag1(conf: dict) -> dict[int, float]:
    """Each finalist's lag-1 autocorrelation of its log ratios (6 rounds or more)."""
    runs = {int(k): v for k, v in conf["runs"].items()}
    base, out = runs[conf["baseline_trial"]], {}
    for t in conf["finalists"]:
        r = [math.log(a / b) for a, b in zip(runs[t], base, strict=False) if a and b]
        m = statistics.fmean(r) if r else 0.0
        den = sum((x - m) ** 2 for x in r)
        if t != conf["baseline_trial"] and len(r) >= 6 and den:
            out[t] = sum((r[i] - m) * (r[i + 1] - m) for i in range(len(r) - 1)) / den
    return out


def main() -> None:
    acfs: list[float] = []
    for path in sys.argv[1:]:
        conf = (yaml.safe_load(open(path)) or {}).get("confirmation") or {}
        if not conf.get("runs"):
            continue
        c, ac = curse(conf), lag1(conf)
        acfs += ac.values()
        print(f"{path}: curse {'(not enough full rounds)' if c is None else f'{c:.3f}'}; "
              f"lag-1 autocorrelation {', '.join(f'{t}: {v:+.2f}' for t, v in ac.items())}")
    if acfs:
        print(f"lag-1 autocorrelation over {len(acfs)} finalists: {min(acfs):+.2f} to "
              f"{max(acfs):+.2f}, mean {statistics.fmean(acfs):+.2f}")


if __name__ == "__main__":
    main()
