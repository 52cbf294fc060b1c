"""Today's confirmation and the indifference-zone one side by side: the same
studies, each run with the code before the change and with this checkout, then a verify-style
check of each export against the fastest other finalist.

    python -m benchmarks.confirmation [--runs 3] [--study readme --study gpt] [--stress]
                                      [--old-commit eea20d3] [--old PATH] [--new-only]
                                      [--verify-rounds 10] [--set KEY=VALUE] [--keep DIR]
                                      [--record]

Run from the repository's root, on an idle machine. The old confirmation is the code at
``--old-commit`` (default eea20d3, main before the change: rounds until every finalist is known
to +-5%, a tie's extra rounds up to half the budget again), checked out with ``git worktree add
--detach PATH COMMIT`` at ``--old`` if it is not there yet, and run through its own
``python -m autotune`` (PYTHONPATH first on the path: the trials' processes inherit it); the
new one is this checkout's. Both run the same command on the same seed:

- ``readme``: the README's command, ``autotune workload=resnet18 study.n_trials=12``;
- ``gpt``: a small GPT of this project's own (``workload=gpt workload.n_layer=4``, the
  shipped decoder-only transformer at 4 layers), ``study.n_trials=8``.

Each is run ``--runs`` times per version. The table gives per study its search time, its
confirmation time, wall / search, the wall time stated once the first window was timed beside
the measured one, the confirmation's rounds and why they stopped, the export with its
interval, and the verify check: ``--verify-rounds`` interleaved rounds (each configuration once
a round, in a random order, each a fresh window as the confirmation's are) of the export
against the fastest other finalist of that study, their paired ratio with its 95% interval,
and whether the export is slower by more than the 5% zone.

``--stress`` runs the README study alone, once per version, with ``stress-ng --cpu 1
--timeout 15`` started when the confirmation starts (its "confirming:" line): the table says
which rounds held a contended window and whether the export is the idle runs' (or within the
zone of it). ``--set`` adds an override to every study (a smoke test: ``--set
study.n_trials=3 --set window.measure_seconds=1``); ``--keep`` keeps the studies in DIR.
``--record`` puts the tables at the top of docs/benchmarks.md with the machine, the date and the
command (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import yaml

from benchmarks.record import command, machine, publish

ROOT = Path(__file__).resolve().parents[1]
#: name -> (workload, overrides): the README's command, and a small GPT of our own.
STUDIES: dict[str, tuple[str, list[str]]] = {
    "readme": ("resnet18", ["study.n_trials=12"]),
    "gpt": ("gpt", ["workload.n_layer=4", "study.n_trials=8"]),
}
ZONE = 1.05  # the default study.indifference, as a ratio: the verify check's line
STRESS = ["stress-ng", "--cpu", "1", "--timeout", "15", "--quiet"]


def merged(overrides: list[str]) -> list[str]:
    """The overrides with one value per key, the later winning (``--set`` over a study's)."""
    out: dict[str, str] = {}
    for o in overrides:
        out[o.split("=", 1)[0]] = o
    return list(out.values())


def old_checkout(path: Path, commit: str) -> Path:
    """The old code's checkout: ``path`` as it is, else a detached worktree of ``commit``."""
    if not (path / "autotune" / "__init__.py").exists():
        print(f"git worktree add --detach {path} {commit}", flush=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT,
                       check=True)
    return path


def run_study(code: Path, workload: str, name: str, out: Path, extra: list[str],
              stress: bool = False) -> dict[str, Any]:
    """One study through ``code``'s command line (its package first on PYTHONPATH); its
    best.yaml, stored study and what the run said. ``stress``: stress-ng beside the
    confirmation, from its first line on."""
    cmd = [sys.executable, "-m", "autotune", f"workload={workload}", f"study.name={name}",
           f"study.out_dir={out}", *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(code), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(cmd, cwd=out, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    hog: subprocess.Popen[bytes] | None = None
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if stress and hog is None and "confirming:" in line:
            hog = subprocess.Popen(STRESS)
    code_ = proc.wait()
    if hog is not None:
        hog.wait(timeout=60)
    best = out / name / "best.yaml"
    if not best.exists():
        raise SystemExit(f"{' '.join(cmd)} exported nothing (exit {code_}):\n"
                         + "".join(lines)[-3000:])
    doc = yaml.safe_load(best.read_text())
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{out / name / 'study.db'}")
    doc["_exit"], doc["_command"], doc["_log"] = code_, " ".join(cmd[2:]), "".join(lines)
    doc["_stressed"] = hog is not None
    doc["_knobs"] = {t.number: t.user_attrs.get("knobs") for t in study.trials}
    doc["_conf"] = study.user_attrs.get("confirmation") or {}
    return doc


def _setup(workload: str, extra: list[str], out: Path) -> Any:
    """This checkout's StudySetup for the study's command (the verify check's windows). The
    overrides go to build_setup as the command line's do: a workload sized by them (GPT's
    ``workload.n_layer=4``) is not CPU-sized, as the study's was not. Until 2026-12-02 they
    were not passed, and the GPT studies' verify rounds measured the CPU-sized GPT (its
    request ``cpu_sized: true``, 20-29k tokens/s where the study's windows read ~3.6k)."""
    from autotune.cli.app import build_setup
    from autotune.cli.compose import compose_config

    overrides = [f"workload={workload}", "study.name=verify", f"study.out_dir={out}", *extra]
    return build_setup(compose_config(overrides), overrides)[0]


def reverify(out: Path, study: str, rounds: int, only: list[str] | None = None) -> list[str]:
    """The verify check again on the studies kept in ``out`` (``--keep``) for ``study`` (those
    named in ``only``, where given): rows of the export against the fastest other finalist,
    nothing else run again. Each check's windows go to a folder of their own (reverify,
    reverify-2, ...): an earlier check's are kept."""
    workload, extra = STUDIES[study]
    setup = _setup(workload, merged(extra), out / "verify-setup")
    rows = []
    for best in sorted(out.glob(f"{study}-*/{study}-*/best.yaml")):
        name = best.parent.name
        if only and name not in only:
            continue
        doc = yaml.safe_load(best.read_text())
        stored = optuna.load_study(study_name=name, storage=f"sqlite:///{best.parent / 'study.db'}")
        doc["_knobs"] = {t.number: t.user_attrs.get("knobs") for t in stored.trials}
        doc["_conf"] = stored.user_attrs.get("confirmation") or {}
        other = fastest_other(doc)
        run = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[1].isdigit() else 0
        check = (verify(setup, doc["_knobs"][int(doc["best_trial"])], doc["_knobs"][other],
                        rounds, _fresh(best.parent.parent / "reverify"), run)
                 if other is not None else None)
        rows.append(f"| {name} | trial {doc['best_trial']} {_interval(doc)} | "
                    f"{_verify_words(check, other)} |")
    return rows


def _fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... where it is taken."""
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


def verify(setup: Any, export: dict[str, Any], other: dict[str, Any], rounds: int,
           out: Path, seed: int) -> tuple[float, float, float, int] | None:
    """``rounds`` interleaved rounds of the two configurations (a random order each round, each
    a fresh figure-only window, as the confirmation's): the export's paired speedup over the
    other, with its 95% interval (None: fewer than 3 rounds measured both)."""
    from autotune.measure.runner import run_window
    from autotune.results.intervals import paired_speedup
    from autotune.search.confirmation.rounds import request

    rng = random.Random(seed)
    # An older study's knobs lack the knobs added since: those at this checkout's baseline.
    export, other = ({**setup.space.baseline, **k} for k in (export, other))
    figures: dict[str, list[float | None]] = {"export": [], "other": []}
    for i in range(rounds):
        order = ["export", "other"]
        rng.shuffle(order)
        for side in order:
            knobs = export if side == "export" else other
            res = run_window(request(setup, knobs), out / f"{i}-{side}")
            figures[side].append(setup.objective(res, knobs) if res.ok else None)
    iv = paired_speedup(figures["export"], figures["other"])
    return (iv.point, iv.low, iv.high, iv.rounds) if iv.known else None


def fastest_other(doc: dict[str, Any]) -> int | None:
    """The finalist with the highest confirmed speedup other than the export."""
    conf, best = doc["_conf"], int(doc["best_trial"])
    ivs = {int(n): float(d["speedup"]) for n, d in (conf.get("intervals") or {}).items()
           if int(n) != best and int(n) != int(conf.get("baseline_trial", -1))}
    return max(ivs, key=lambda n: ivs[n]) if ivs else None


def _phases(doc: dict[str, Any]) -> dict[str, float]:
    wall = doc["study"]["wall"]
    return {k: float(v["measured_s"]) for k, v in (wall.get("phases") or {}).items()}


def _interval(doc: dict[str, Any]) -> str:
    iv = (doc["_conf"].get("intervals") or {}).get(str(doc.get("best_trial")))
    if not iv or iv.get("ci_low") is None:
        return str(doc.get("speedup_text") or "-")
    return f"{iv['speedup']:.2f}x ({iv['ci_low']:.2f}-{iv['ci_high']:.2f})"


def _verify_words(check: tuple[float, float, float, int] | None, other: int | None) -> str:
    if other is None:
        return "no other finalist"
    if check is None:
        return f"vs trial {other}: too few rounds"
    point, low, high, n = check
    verdict = ("slower by more than the zone" if high < 1 / ZONE else
               "within the zone or faster" if point >= 1 / ZONE else "not told apart")
    return f"vs trial {other}: {point:.3f} ({low:.3f}-{high:.3f}, {n} rounds): {verdict}"


def row(study: str, version: str, run: int, doc: dict[str, Any], check: str) -> str:
    phases, wall = _phases(doc), float(doc["study"]["wall"]["measured_s"])
    search, confirm = phases.get("search", 0.0), phases.get("confirmation", 0.0)
    expected = doc["study"]["wall"].get("expected_s")
    said = f"{expected:.0f} ({100 * (wall / expected - 1):+.0f}%)" if expected else "-"
    end = doc["study"]["wall"].get("search_end_s")
    at_end = f"{end:.0f} ({100 * (wall / end - 1):+.0f}%)" if end else "-"
    most = doc["study"]["wall"].get("search_end_most_s")
    at_most = f"{most:.0f} ({'held' if wall <= most else 'exceeded'})" if most else "-"
    conf = doc["_conf"]
    stopped = f"{conf.get('rounds', '-')} ({conf.get('stopped', '-')})"
    return (f"| {study} | {version} | {run} | {search:.0f} | {confirm:.0f} | {wall:.0f} | "
            f"{wall / max(search, 1e-9):.2f} | {said} | {at_end} | {at_most} | {stopped} | trial {doc['best_trial']} "
            f"{_interval(doc)} | {check} | {doc['_exit']} |")


def summary(study: str, version: str, docs: list[dict[str, Any]]) -> str:
    ratios = [float(d["study"]["wall"]["measured_s"]) / max(_phases(d).get("search", 0.0), 1e-9)
              for d in docs]
    misses = [abs(float(d["study"]["wall"]["measured_s"]) / float(d["study"]["wall"][key])
                  - 1) for key in ("expected_s", "search_end_s") for d in docs
              if d["study"]["wall"].get(key)]
    end = [abs(float(d["study"]["wall"]["measured_s"]) / float(d["study"]["wall"]["search_end_s"])
               - 1) for d in docs if d["study"]["wall"].get("search_end_s")]
    held = [float(d["study"]["wall"]["measured_s"]) <= float(d["study"]["wall"][
        "search_end_most_s"]) for d in docs if d["study"]["wall"].get("search_end_most_s")]
    exports = sorted({int(d["best_trial"]) for d in docs})
    return (f"| {study} | {version} | {len(docs)} | {statistics.median(ratios):.2f} | "
            f"{max(ratios):.2f} | {100 * max(misses, default=math.nan):.0f}% | "
            f"{100 * max(end, default=math.nan):.0f}% | {sum(held)} of {len(held)} | "
            f"{', '.join(map(str, exports))} |")


def contended_rounds(doc: dict[str, Any]) -> str:
    """The confirmation's rounds that held a contended window, and whose."""
    flags = doc["_conf"].get("contended") or {}
    by_round: dict[int, list[str]] = {}
    for n, vals in flags.items():
        for i, busy in enumerate(vals):
            if busy:
                by_round.setdefault(i + 1, []).append(n)
    return "; ".join(f"round {i}: trial(s) {', '.join(ns)}" for i, ns in sorted(by_round.items())) \
        or "none"


def stress_row(version: str, doc: dict[str, Any], idle: list[dict[str, Any]]) -> str:
    knobs = doc["_knobs"][int(doc["best_trial"])]
    same = [d for d in idle if d["_knobs"][int(d["best_trial"])] == knobs]
    left_out = ("left out of every comparison (intervals.counted_rounds)"
                if "selection" in doc["_conf"] else
                "left out of intervals only, counted in paired comparisons")
    return (f"| {version} | {'yes' if doc['_stressed'] else 'no (no confirmation line)'} | "
            f"{contended_rounds(doc)} | {left_out} | trial {doc['best_trial']} "
            f"{_interval(doc)} | {len(same)} of {len(idle)} idle runs | {doc['_exit']} |")


@contextlib.contextmanager
def _folder(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="confirmation-") as tmp:
        yield Path(tmp)


def _head() -> str:
    """This checkout's commit, as the section names the code it measured."""
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() or "an unknown commit"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="idle runs per study and version")
    ap.add_argument("--study", action="append", choices=sorted(STUDIES),
                    help="a study to run (repeatable; default: all)")
    ap.add_argument("--stress", action="store_true",
                    help="also the README study beside stress-ng --cpu 1 --timeout 15 during "
                         "its confirmation, once per version")
    ap.add_argument("--old-commit", default="eea20d3", help="the code before the change")
    ap.add_argument("--old", type=Path, default=Path(tempfile.gettempdir()) / "autotune-old",
                    help="its checkout (made with git worktree add where absent)")
    ap.add_argument("--new-only", action="store_true", help="skip the old code's runs")
    ap.add_argument("--verify-rounds", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every study (repeatable)")
    ap.add_argument("--keep", type=Path, help="keep the studies here (default: a temporary folder)")
    ap.add_argument("--record", action="store_true", help="put the tables in docs/benchmarks.md")
    ap.add_argument("--reverify", action="store_true",
                    help="only the verify check again, on the studies kept in --keep")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="with --reverify: this kept study only (gpt-new-2; repeatable)")
    a = ap.parse_args()
    if a.reverify:
        if a.keep is None:
            raise SystemExit("--reverify reads the studies kept in --keep DIR")
        rows = [r for study in a.study or list(STUDIES)
                for r in reverify(a.keep, study, a.verify_rounds, a.only)]
        publish([f"## The verify check again on the studies kept in {a.keep.name} "
                 f"({datetime.date.today()})", "",
                 f"Command: `{command('benchmarks.confirmation')}` (this checkout at "
                 f"{_head()}): {a.verify_rounds} interleaved rounds of each kept study's export "
                 "against its fastest other finalist, each a fresh figure-only window of the "
                 "study's own workload; the zone's line is 1/1.05.", "",
                 "| study | export (95% CI) | verify: export / fastest other finalist |",
                 "|---|---|---|", *rows, ""], a.record)
        return
    if a.stress and shutil.which("stress-ng") is None:
        raise SystemExit("--stress runs stress-ng beside the confirmation: install it "
                         "(apt-get install stress-ng), or leave --stress out.")
    versions = {"new": ROOT}
    if not a.new_only:
        versions = {"old": old_checkout(a.old.resolve(), a.old_commit), **versions}
    names = a.study or list(STUDIES)
    rows, sums, stressed = [], [], []
    first: dict[str, Any] | None = None
    with _folder(a.keep) as out:
        for study in names:
            workload, extra = STUDIES[study]
            extra = merged([*extra, *a.set])
            setup = _setup(workload, extra, out / "verify-setup")
            idle: dict[str, list[dict[str, Any]]] = {}
            for version, code in versions.items():
                for run in range(1, a.runs + 1):
                    name = f"{study}-{version}-{run}"
                    (out / name).mkdir(exist_ok=True)
                    print(f"{name}: {version} code, {workload} {' '.join(extra)}", flush=True)
                    doc = run_study(code, workload, name, out / name, extra)
                    first = first or doc
                    other = fastest_other(doc)
                    check = (verify(setup, doc["_knobs"][int(doc["best_trial"])],
                                    doc["_knobs"][other], a.verify_rounds,
                                    out / name / "verify", run)
                             if other is not None and a.verify_rounds else None)
                    rows.append(row(study, version, run, doc, _verify_words(check, other)))
                    idle.setdefault(version, []).append(doc)
                sums.append(summary(study, version, idle[version]))
            if a.stress and study == "readme":
                for version, code in versions.items():
                    name = f"{study}-{version}-stress"
                    (out / name).mkdir(exist_ok=True)
                    doc = run_study(code, workload, name, out / name, extra, stress=True)
                    stressed.append(stress_row(version, doc, idle[version]))
    assert first is not None
    cmd = command("benchmarks.confirmation")
    old = (f"Only the new code ran (`--new-only`: the old code, {a.old_commit}'s rounds until "
           "every finalist is known to +-5%, was not measured again here)" if a.new_only else
           f"Old: the code at {a.old_commit} (rounds until every finalist is known to +-5%, a "
           "tie's rounds up to half the budget again)")
    lines = [
        "## The confirmation decides, then stops: "
        + ("the new confirmation" if a.new_only else "old and new side by side")
        + f" ({datetime.date.today()})",
        "",
        f"{machine(first)} Command: `{cmd}`. {old}; new: this checkout at {_head()} (the "
        "indifference-zone selection, study.indifference=0.05). Verify: "
        f"{a.verify_rounds} interleaved rounds of the export against the fastest other "
        "finalist, its paired ratio (95% CI); the zone's line is 1/1.05.",
        "",
        "| study | code | run | search s | confirmation s | wall s | wall / search "
        "| stated after the first window (miss) | stated at the search's end (miss) "
        "| at most, stated then | rounds (stopped) | export (95% CI) "
        "| verify: export / fastest other finalist | exit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| study | code | runs | wall / search (median) | wall / search (max) "
        "| largest miss of a stated wall time | largest miss at the search's end "
        "| within the stated most | exported trials |",
        "|---|---|---|---|---|---|---|---|---|",
        *sums,
        "",
    ]
    if stressed:
        lines += [
            "Beside `stress-ng --cpu 1 --timeout 15`, started at the confirmation's first line:",
            "",
            "| code | stressed | rounds with a contended window | what became of them "
            "| export (95% CI) | the same export as | exit |",
            "|---|---|---|---|---|---|---|",
            *stressed,
            "",
        ]
    publish(lines, a.record)


if __name__ == "__main__":
    main()
