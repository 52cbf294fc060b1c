"""Does a study end when it said it would? Each study below runs through the command line as a
user types it; the table sets the wall time the header stated once the first window was timed
beside the wall time measured, phase by phase.

    python -m benchmarks.estimates [--study mlp-2ranks --study jpeg-2ranks ...] [--record]

Run from the repository's root. The studies are the shapes whose estimates missed most (two
ranks per trial: a launch per window, an all-reduce probe in the search's windows and none in
the confirmation's; a workload decoding images in its loader); ``readme`` is the README's
command. ``--record`` puts the table at the top of docs/benchmarks.md with the machine, the
date and the command.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
from pathlib import Path

from benchmarks.record import command, machine, publish
from benchmarks.time_budget import row, run_study

#: name -> (workload, the other overrides)
STUDIES: dict[str, tuple[str, list[str]]] = {
    "readme": ("resnet18", []),
    "mlp-2ranks": ("mlp", ["workload.hidden=1024", "workload.depth=3",
                           "launch.nproc_per_node=2"]),
    "jpeg-2ranks": ("jpeg", ["launch.nproc_per_node=2"]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", action="append", choices=sorted(STUDIES),
                    help="a study to run (repeatable; default: the two 2-rank studies)")
    ap.add_argument("--record", action="store_true", help="add the section to docs/benchmarks.md")
    a = ap.parse_args()
    names = a.study or ["mlp-2ranks", "jpeg-2ranks"]
    docs = {}
    with tempfile.TemporaryDirectory(prefix="estimates-") as tmp:
        for name in names:
            workload, extra = STUDIES[name]
            docs[name] = run_study(workload, name, Path(tmp), extra)
    first = next(iter(docs.values()))
    lines = [
        f"## Does a study end when it said it would? ({datetime.date.today()})",
        "",
        f"{machine(first)} Command: `{command('benchmarks.estimates')}`; each study as "
        "`autotune <its overrides>`:",
        "",
        *(f"- {name}: `{doc['_command']}`" for name, doc in docs.items()),
        "",
        "| study | trials | search s | confirmation s | numerics s | wall s | expected s (miss) "
        "| wall / search | speedup (95% CI) | exported knobs changed | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(row(name, doc, doc["_baseline_knobs"]) for name, doc in docs.items()),
        "",
    ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
