"""The old path and the new side by side: a study whose finalists are measured in rounds
only after the search (``study.race=false``) and the same study racing them during the search
(search/loop/race.py, ``study.race=true``), and, with ``--ratio``, the racing study under
``study.time_budget_s``; with ``--stress N``, all of them beside ``stress-ng --cpu N``, to see
that the trust contract holds under the race and the budget (contended windows named, exit 4
"too busy to measure" where the rounds cannot tell).

    python -m benchmarks.race [--workload resnet18] [--ratio 1.5] [--stress 1] [--record]
                              [--set device=cuda --set study.n_trials=12] [--keep DIR]

``--set`` adds an override to every study (the GPU check's race step: ``device=cuda`` and
fewer trials, to fit a short GPU session); ``--keep`` keeps the studies in DIR instead of a temporary folder.

Run from the repository's root. Each study is the README's command as a user types it (plus a
study name and a temporary out_dir), on the same seed. The table splits the search's time into
its trials' windows and the race's rounds, so that "wall / search" is read against the
trials' own time (what the search costs without rounds), and compares the exported knobs and
the speedup's interval; ``--record`` puts it at the top of docs/benchmarks.md with the
machine, the date and the command (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.record import command, machine, publish
from benchmarks.time_budget import interval, phase_seconds, run_study


def _race_s(doc: dict[str, Any]) -> float:
    return float(((doc.get("confirmation") or {}).get("race") or {}).get("spent_s") or 0.0)


def row(label: str, doc: dict[str, Any], base_knobs: dict[str, Any]) -> str:
    phases = phase_seconds(doc)
    wall = float(doc["study"]["wall"]["measured_s"])
    search, race = phases.get("search", 0.0), _race_s(doc)
    own = max(search - race, 1e-9)  # the trials' windows: the search without the race's rounds
    iv = interval(doc)
    conf = doc.get("confirmation") or {}
    changed = {k: v for k, v in doc["knobs"].items() if base_knobs.get(k) != v}
    speed = f"{iv[0]:.2f}x ({iv[1]:.2f}-{iv[2]:.2f})" if iv else doc.get("speedup_text") or "-"
    expected = doc["study"]["wall"].get("expected_s")
    said = f"{expected:.0f} ({100 * (wall / expected - 1):+.0f}%)" if expected else "-"
    rounds = f"{conf.get('rounds', '-')} ({(conf.get('race') or {}).get('rounds', 0)} raced)"
    return (f"| {label} | {doc['study']['trials']} | {own:.0f} | {race:.0f} | "
            f"{phases.get('confirmation', 0):.0f} | {phases.get('numerics check', 0):.0f} | "
            f"{wall:.0f} | {said} | {wall / own:.2f} | {rounds} | {speed} | "
            f"{', '.join(f'{k}={v}' for k, v in changed.items()) or 'none'} | {doc['_exit']} |")


def load_row(label: str, doc: dict[str, Any]) -> str:
    """What the study said about the machine's load: its contended windows and whether it
    could rank configurations at all."""
    c = doc.get("contention") or {}
    could_not = c.get("could_not_measure")
    return f"| {label} | {c.get('windows') or '-'} | {could_not or 'ranked'} | {doc['_exit']} |"


@contextlib.contextmanager
def _folder(keep: Path | None) -> Iterator[Path]:
    """Where the studies go: ``keep`` (made, and left), else a temporary folder."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="race-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def stress(cpus: int) -> Iterator[None]:
    """``stress-ng --cpu cpus`` for as long as the block runs (0: nothing)."""
    if not cpus:
        yield
        return
    proc = subprocess.Popen(["stress-ng", "--cpu", str(cpus), "--quiet"])
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="resnet18")
    ap.add_argument("--ratio", type=float, default=0.0,
                    help="also the racing study under study.time_budget_s = this x the old "
                         "study's search (0: not run)")
    ap.add_argument("--stress", type=int, default=0,
                    help="run every study beside stress-ng --cpu N (0: an idle machine)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every study (repeatable)")
    ap.add_argument("--keep", type=Path, help="keep the studies here (default: a temporary folder)")
    ap.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    a = ap.parse_args()
    docs: list[tuple[str, dict[str, Any]]] = []
    with _folder(a.keep) as out, stress(a.stress):
        old = run_study(a.workload, "old", out, [*a.set, "study.race=false"])
        docs.append(("rounds after the search (study.race=false)", old))
        docs.append(("raced during the search",
                     run_study(a.workload, "raced", out, [*a.set, "study.race=true"])))
        if a.ratio:
            budget = round(a.ratio * phase_seconds(old)["search"])
            docs.append((f"raced, time_budget_s={budget}", run_study(
                a.workload, "budget", out,
                [*a.set, "study.race=true", f"study.time_budget_s={budget}"])))
    base = old["_baseline_knobs"]
    cmd = command("benchmarks.race")
    lines = [
        f"## The finalists raced during the search ({datetime.date.today()}, {a.workload})",
        "",
        f"{machine(old)} Command: `{cmd}`: "
        f"`{old['_command']}`, then the same with `study.race=true`"
        + (f", every study beside `stress-ng --cpu {a.stress}`." if a.stress else "."),
        "",
        "| study | trials | trials' windows s | race s | confirmation s | numerics s | wall s "
        "| expected s (miss) | wall / trials' windows | rounds | speedup (95% CI) "
        "| exported knobs changed | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[row(label, doc, base) for label, doc in docs],
        "",
        "| study | contended windows | could it rank configurations? | exit |",
        "|---|---|---|---|",
        *[load_row(label, doc) for label, doc in docs],
        "",
    ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
