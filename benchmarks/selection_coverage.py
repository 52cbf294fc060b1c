"""The confirmation's stated levels against simulated studies: the probability of correct
selection and the coverage of the exported 95% interval, per design, with the confirmation's
own code deciding (autotune/search/confirmation/simulate.py says what the windows carry).

    python -m benchmarks.selection_coverage [--studies 1000] [--seed 0] [--workers 2]
        [--json FILE] [--quick] [--before FILE]

It measures nothing on this machine (no window runs): the windows are drawn. Each row is one
design: k finalists at Kim and Nelson's least favourable configuration (the best ahead of the
others by exactly the 5% zone, where correct selection is hardest; KN 2001, section 5) or all
equal (2.0x, where every export is correct and the interval's coverage is the question), the
window spread, whether the search's windows are round 1, and whether a contended round is
injected (round 2). Nominal: 95% correct selection (study.correct_selection) and 95% coverage.
The rounds stop where the confirmation stops them, at the latest at its 30-round cap (a
design the cap ends is marked: KN's guarantee is for the procedure run to its end).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from autotune.search.confirmation.simulate import (
    Noise,
    Setting,
    curse,
    lfc,
    simulate,
    summary,
)

SPREADS = (0.03, 0.10, 0.17)
KS = (2, 3, 5, 7)


def designs(quick: bool = False) -> list[tuple[str, Setting]]:
    """The rows: (name, setting). The confirmation as it runs (no search round) over the whole
    grid; the search's windows as round 1 (as before 2026-12-03), plain or each the best of 3
    of its configuration's (``search_pool``), where the question was whether they may stay."""
    ks, spreads = ((2, 5), (0.03, 0.10)) if quick else (KS, SPREADS)
    out = [("lfc", Setting(lfc(k), Noise(spread))) for k in ks for spread in spreads]
    for k in (2, 5):
        for spread in (0.03, 0.10):
            out.append(("lfc", Setting(lfc(k), Noise(spread), search_round=True)))
    for spread in (0.03, 0.10):
        out.append(("lfc", Setting(lfc(5), Noise(spread), search_round=True, search_pool=3)))
    for search in (False, True):
        out.append(("lfc", Setting(lfc(3), Noise(0.10), search_round=search, contended=2)))
    for spread in (0.03, 0.10):
        for search, pool in ((False, 1), (True, 1), (True, 3)):
            out.append(("equal", Setting((2.0,) * 5, Noise(spread), search_round=search,
                                         search_pool=pool)))
    return out


def _row(job: tuple[str, Setting, int, int]) -> dict[str, Any]:
    name, setting, studies, seed = job
    outcomes = simulate(setting, studies, seed)
    s = summary(outcomes)
    return {"design": name, "k": len(setting.speedups), "spread": setting.noise.spread,
            "search_round": setting.search_round, "contended": setting.contended,
            "studies": s.studies, "pcs": s.pcs, "pcs_se": s.pcs_se, "coverage": s.coverage,
            "coverage_se": s.coverage_se, "rounds": s.rounds,
            "capped": sum(o.stopped == "rounds" for o in outcomes) / len(outcomes),
            "setting": asdict(setting)}


def _search(r: dict[str, Any]) -> str:
    pool = int(r["setting"].get("search_pool") or 1)
    return "no" if not r["search_round"] else "yes" if pool == 1 else f"yes, best of {pool}"


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["design"], r["k"], r["spread"], _search(r), r["contended"])


def table(rows: list[dict[str, Any]], before: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The rows as a markdown table; ``before``: an earlier run's rows (``--json``), shown
    beside the rows they match."""
    old = {_key(r): r for r in before}
    lines = ["| design | k | spread | search round 1 | contended round | studies | correct "
             "selection (nominal 95%) | coverage (nominal 95%) | mean rounds | ended by the cap "
             "| before: correct selection, coverage |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = old.get(_key(r))
        was = f"{100 * b['pcs']:.1f}%, {100 * b['coverage']:.1f}%" if b else "-"
        lines.append(
            f"| {r['design']} | {r['k']} | {100 * r['spread']:.0f}% | "
            f"{_search(r)} | {r['contended'] or '-'} | {r['studies']} | "
            f"{100 * r['pcs']:.1f}% ± {100 * r['pcs_se']:.1f} | "
            f"{100 * r['coverage']:.1f}% ± {100 * r['coverage_se']:.1f} | {r['rounds']:.1f} | "
            f"{100 * r['capped']:.0f}% | {was} |")
    return lines


def _seed(name: str, s: Setting) -> int:
    pool = getattr(s, "search_pool", 1)
    key = (name, s.speedups, s.noise.spread, s.search_round, s.contended, pool)
    return zlib.crc32(repr(key).encode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--quick", action="store_true", help="fewer designs")
    ap.add_argument("--before", help="an earlier run's --json, shown beside the rows")
    args = ap.parse_args()
    # Each design's windows from its own seed, the same in every run and at every commit:
    # a before-and-after comparison then reads the same windows (common random numbers).
    jobs = [(name, s, args.studies, args.seed + _seed(name, s)) for name, s in
            designs(args.quick)]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(_row, jobs))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    print(f"commit {commit}")
    before = json.loads(Path(args.before).read_text())["rows"] if args.before else []
    print("\n".join(table(rows, before)))
    n = 100 * args.studies
    for k in (2, 5, 7):
        pair = [curse(n, k=k, search_round=s, seed=args.seed, slow_share=0.1, drift=0.035)
                for s in (True, False)]
        print(f"winner's curse alone, {k} finalists all 2.0x, the fastest search window's "
              f"3-round interval ({n} studies, 10% spread): {100 * pair[0]:.2f}% with its search "
              f"window as round 1, {100 * pair[1]:.2f}% with 3 fresh rounds "
              f"(± {100 * math.sqrt(0.05 * 0.95 / n):.2f} each)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"commit": commit, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
