"""A newcomer's walk, measured: which of autotune's modules a one-trial study passes through in
the driver's process, and how many of the moves between them climb back up a layer.

    python -m benchmarks.walk [--trials 1] [overrides...]

Run from the repository's root. It runs ``autotune workload=mlp`` (a tiny window, one trial,
no confirmation: the path from the command line to a trial's window and back) under
``sys.setprofile`` and records every call from one autotune module into another. A move is a
distinct (caller module, callee module) pair; it climbs when the callee sits in a higher
layer than the caller (pyproject.toml's import contracts: the package layers, and inside
``autotune.search`` its rooms), which only a callback or an object handed down can do. The
moves are printed in the order first taken, the climbing ones marked.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

#: pyproject.toml's layers, top first; inside search, its rooms, top first.
PACKAGES = ["adapters", "cli", "search", "production", "results", "measure|workloads",
            "diagnose", "core"]
SEARCH = ["run", "loop", "console", "checks", "confirmation",
          "setup|pruning|units|contended|round_spread"]
#: The flat search/ before its rooms (main before they were made), each module by its room,
#: so that the same walk can be measured on either side of the move.
FLAT = {"study": "loop", "agent": "loop", "ownership": "loop", "failfast": "loop",
        "conditions": "loop", "window_record": "loop", "budget": "loop", "race": "loop",
        "same_training": "loop", "confirm": "confirmation", "choose": "confirmation",
        "confirm_words": "confirmation", "numerics": "checks", "scaling": "checks",
        "cost": "console", "progress": "console", "summary": "console", "verify": "run"}


def rank(module: str) -> tuple[int, int] | None:
    """A module's layer, smaller is higher: (package layer, room inside search)."""
    parts = module.split(".")
    if parts[0] != "autotune" or len(parts) < 2:
        return None
    top = next((i for i, p in enumerate(PACKAGES) if parts[1] in p.split("|")), None)
    if top is None:
        return None
    inner = 0
    if parts[1] == "search" and len(parts) > 2:
        room = FLAT.get(parts[2], parts[2])
        inner = next((i for i, r in enumerate(SEARCH) if room in r.split("|")), 0)
    return top, inner


def walk(argv: list[str]) -> list[tuple[str, str]]:
    """The distinct moves between autotune modules, in the order first taken."""
    from autotune.cli.main import main as cli_main
    seen: dict[tuple[str, str], None] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "")
        if (callee != caller and callee.startswith("autotune.")
                and caller.startswith("autotune.")):
            seen.setdefault((caller, callee), None)

    import autotune.cli.main as cli

    class Done(Exception):
        pass

    def ended(code: object) -> None:  # the command line ends in os._exit (core/quick_exit.py)
        raise Done(code)

    sys.argv = ["autotune", *argv]
    cli.quick_exit = ended  # type: ignore[assignment]
    sys.setprofile(profile)
    try:
        cli_main()
    except (Done, SystemExit):
        pass
    finally:
        sys.setprofile(None)
    return list(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="walk-") as tmp:
        argv = ["workload=mlp", "device=cpu", f"study.n_trials={a.trials}",
                f"study.out_dir={Path(tmp)}", "study.confirm_runs=0", "study.numerics_steps=0",
                "window.warmup_steps=2", "window.measure_steps=6", "window.measure_seconds=2",
                "window.min_measure_seconds=1", "window.profile=false", *a.overrides]
        moves = walk(argv)
    up = 0
    lines = []
    for caller, callee in moves:
        a_rank, b_rank = rank(caller), rank(callee)
        climbs = a_rank is not None and b_rank is not None and b_rank < a_rank
        up += climbs
        lines.append(f"{'UP ' if climbs else '   '}{caller} -> {callee}")
    print("\n".join(lines))
    print(f"\n{len(moves)} moves between modules, {up} of them climbing back up a layer "
          f"({100 * up / max(len(moves), 1):.0f}%); {len({m for mv in moves for m in mv})} "
          "modules")


if __name__ == "__main__":
    main()
