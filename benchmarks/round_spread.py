"""How long the confirmation ran against what the study said it would: read from stored studies.

For each study given (its study.db, the default storage layout studies/<name>/study.db): the
rounds' spread its confirmation measured (search/round_spread.measured_spread, the figure a
later study on this device starts from), the rounds it ran and why they stopped, and the
confirmation's and the whole study's wall time beside the estimate made after the first window.
With --write, the table goes to docs/benchmarks.md under a heading naming the machine.

    PYTHONPATH=. python benchmarks/round_spread.py /tmp/user1/studies/resnet18-cpu/study.db \
        --label "README command" --write
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.core.env import probe  # noqa: E402
from autotune.results.record import study_attrs  # noqa: E402
from autotune.search.round_spread import measured_spread  # noqa: E402
from benchmarks.history import prepend_section  # noqa: E402


def row(db: Path, label: str) -> str:
    """One study's line of the table."""
    name = db.parent.name
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    attrs: dict[str, Any] = dict(study_attrs(study))
    conf = attrs.get("confirmation") or {}
    wall = attrs.get("wall") or {}
    phase = (wall.get("phases") or {}).get("confirmation") or {}
    spread = measured_spread(conf)
    source = (wall.get("round_spread") or {}).get("source")
    expected = (f"{wall['confirm_rounds']}, at {source}" if "confirm_rounds" in wall
                else "not said (a study made before they were)")
    return (f"| {label} (`{name}`) | {'-' if spread is None else f'{100 * spread:.1f}%'} | "
            f"{conf.get('rounds', '-')} ({conf.get('stopped', '-')}) | "
            f"{expected} | "
            f"{phase.get('measured_s', '-')} s / ~{phase.get('expected_s', '-')} s | "
            f"{wall.get('measured_s', '-')} s / ~{wall.get('expected_s', '-')} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+", type=Path, help="studies/<name>/study.db files")
    ap.add_argument("--label", action="append", default=[],
                    help="what each study was (in order; default: its name)")
    ap.add_argument("--write", action="store_true", help="prepend to docs/benchmarks.md")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    labels = args.label + [db.parent.name for db in args.dbs[len(args.label):]]
    env = probe("cpu")
    lines = ["| study | rounds' spread (widest finalist, SD of log ratios) | rounds (stopped) | "
             "rounds expected, at | confirmation: measured / expected | study: measured / "
             "expected |", "|---|---|---|---|---|---|"]
    lines += [row(db, label) for db, label in zip(args.dbs, labels, strict=True)]
    table = "\n".join(lines)
    print(table)
    if args.write:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        prepend_section(f"## How long the confirmation runs ({now}, {env.device_name}, "
                        f"{env.cpu_count} CPUs, Python {platform.python_version()}, torch "
                        f"{env.torch_version})\n\n    PYTHONPATH=. python "
                        f"benchmarks/round_spread.py {' '.join(map(str, args.dbs))}\n\n{table}\n")


if __name__ == "__main__":
    main()
