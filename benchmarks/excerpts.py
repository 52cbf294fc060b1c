"""The console excerpts the documentation shows, cut from one real run of the README's command.

    python -m benchmarks.excerpts                   # runs `autotune workload=resnet18` (~8 min
                                                    # on the 2-core VM), records it, rewrites
    python -m benchmarks.excerpts --from-record     # rewrites the excerpts from the recording
    python -m benchmarks.excerpts -- study.n_trials=4   # a shortened run (its caption says so)

It measures, so it runs alone on an idle machine, as every benchmark does (hence its place
here, beside them: the lead runs ``python -m benchmarks.<name>`` once, and the tests import its
rules). The run happens in a fresh folder, as on a fresh clone (``studies/resnet18-cpu`` is new,
its paths print as a user's do), with its console (stdout and stderr, unbuffered, in the order a
terminal shows them) recorded whole in ``docs/runs/resnet18-cpu/``: ``console.txt``, ``run.json``
(the command, the date, the commit, the machine, the load, the wall time, the exit code), and
what the lines were printed from: the study's ``study.db``, each trial's ``result.json`` and
``best.yaml``.

Each page's excerpt sits between markers (``<!-- excerpt: NAME -->`` and ``<!-- /excerpt -->``)
and is cut by fixed rules (``PAGES``): the lines are tagged by what printed them (``tag``) and a
page takes the tags its rule names, with ``...`` where the console has lines between them, and
a caption from run.json. Only tags that tests/test_docs_excerpts.py renders again from the
recording with today's code can be taken: a line the summary (or the header, a trial, the
progress, the estimate, the confirmation) prints in another shape fails that test until this
script is run again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The README's main command, as ``autotune`` takes it.
COMMAND = ["workload=resnet18"]
STUDY = "resnet18-cpu"
RECORD = ROOT / "docs" / "runs" / STUDY
#: Where a page's generated block starts and ends.
START = "<!-- excerpt: {name} (python -m benchmarks.excerpts writes this block) -->"
END = "<!-- /excerpt -->"


@dataclass(frozen=True)
class Line:
    """One console line and what printed it: ``kind`` (header, plan, trial, result,
    diagnosis, progress, estimate, confirmed, summary, other) and ``key`` (the trial's number,
    or the line's place in its block)."""

    index: int
    kind: str
    key: int
    text: str


#: A trial's line (search/console/progress.StudyProgress.brief).
_PROGRESS = re.compile(r"^\[\d+/\d+ [^\]]*\] trial (\d+) ")
_ROUND = re.compile(r"^  round (\d+) \(")


def tag(console: Sequence[str]) -> list[Line]:
    """Each line of a study's console at the default verbosity with what printed it: the
    header (cli/app.print_header, then search/console/cost.plan_brief), a trial's line
    (search/console/progress.py), the estimate (search/console/estimate.py), the
    confirmation's start and rounds (search/confirmation/words.py), the summary
    (search/console/summary.brief_lines, then the report's line) and, among its lines, the
    statement that the machine could not measure (results/trust.could_not_measure):
    everything else is ``other``."""
    out: list[Line] = []
    block, key = "", 0
    for i, text in enumerate(console):
        kind, k = "other", 0
        indented = text.startswith("  ")
        if text.startswith("autotune: study '"):
            block, key = "header", 0
            kind, k = "header", 0
        elif block == "header" and indented:
            key += 1
            kind, k = "header", key
        elif m := _PROGRESS.match(text):
            kind, k, block = "progress", int(m.group(1)), ""
        elif text.startswith("expected wall time ~"):
            kind, block = "estimate", ""
        elif text.startswith("confirming trials "):
            kind, block = "confirming", ""
        elif m := _ROUND.match(text):
            kind, k = "round", int(m.group(1))
        elif text.startswith("study '") and console[i - 1:i] == [""]:
            block, key = "summary", 0
            kind, k = "summary", 0
        elif block == "summary" and indented:
            key += 1
            kind, k = "summary", key
        elif block == "summary" and text.startswith("autotune: "):
            kind = "verdict"  # search/run.py: why the study could not measure (stderr)
        else:
            block = "" if text else block
        out.append(Line(i, kind, k, text))
    return out


# --- which lines each page shows ----------------------------------------------------------

Rule = Callable[[list[Line], dict[str, Any]], list[Line]]


def _readme(lines: list[Line], run: dict[str, Any]) -> list[Line]:
    """The header; the baseline's line; the estimate; the exported trial's line; the
    confirmation's start and last round; the whole summary (with the statement that the
    machine could not measure, where there is one)."""
    best = run["best_trial"]
    rounds = [ln for ln in lines if ln.kind == "round"]
    return [*[ln for ln in lines if ln.kind == "header"],
            *[ln for ln in lines if ln.kind == "progress" and ln.key in (0, best)],
            *[ln for ln in lines if ln.kind in ("estimate", "confirming")],
            *rounds[-1:],
            *[ln for ln in lines if ln.kind in ("summary", "verdict")]]


def _getting_started(lines: list[Line], run: dict[str, Any]) -> list[Line]:
    """The whole console at the default verbosity: every line but the notes a busy machine
    adds (``other``)."""
    return [ln for ln in lines if ln.kind != "other"]


def _training(lines: list[Line], run: dict[str, Any]) -> list[Line]:
    """The summary's statement of what the answer changes in training."""
    return [ln for ln in lines if ln.kind == "summary" and ln.text.startswith("  training: ")]


def _progress(lines: list[Line], run: dict[str, Any]) -> list[Line]:
    """One trial's line past the first few trials: the third's, or the last there is."""
    progress = [ln for ln in lines if ln.kind == "progress"]
    return progress[2:3] or progress[-1:]


def sizes(console: Sequence[str]) -> dict[str, int]:
    """What the issue of 2026-12 measured the console by: characters, lines, lines over 120
    characters, the longest line."""
    return {"chars": sum(len(t) + 1 for t in console), "lines": len(console),
            "over_120": sum(len(t) > 120 for t in console),
            "longest": max((len(t) for t in console), default=0)}


@dataclass(frozen=True)
class Page:
    path: Path
    rule: Rule
    caption: Callable[[dict[str, Any], str], str]


def _when(run: dict[str, Any]) -> str:
    commit = run["commit"] + (" with uncommitted changes" if run.get("dirty") else "")
    shortened = (f" (shortened: `autotune {' '.join(run['command'])}`)"
                 if run["command"] != COMMAND else "")
    m = run["machine"]
    return (f"{m['cpu']}, {m['cores']} cores, {m['memory_gb']:.1f} GB, torch {m['torch']}; "
            f"{run['date']}, commit {commit}; 1-minute load average {run['load_start']:.2f} "
            f"as it started{shortened}; {_clock(run['wall_s'])} in all, exit code "
            f"{run['exit_code']}")


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}:{s % 60:02d}"


def _readme_caption(run: dict[str, Any], to_record: str) -> str:
    return (f"(Excerpts of a real run of the command above: {_when(run)}. The whole console is "
            f"[{to_record}/console.txt]({to_record}/console.txt); the excerpts in "
            "[Getting started](docs/getting-started.md) and here are cut from it by "
            "`python -m benchmarks.excerpts`, and `tests/test_docs_excerpts.py` prints their "
            "lines again from the recorded study with today's code.)")


def _getting_started_caption(run: dict[str, Any], to_record: str) -> str:
    return (f"(Excerpts of a real run of that command: {_when(run)}. The whole console is "
            f"[console.txt]({to_record}/console.txt), the study's best.yaml beside it.)")


def _training_caption(run: dict[str, Any], to_record: str) -> str:
    return "(The summary's line in the run above.)"


def _progress_caption(run: dict[str, Any], to_record: str) -> str:
    return (f"(A line of the run in [Getting started](../getting-started.md#from-the-command-line), "
            f"{run['date']}: [its whole console]({to_record}/console.txt).)")


PAGES: dict[str, Page] = {
    "readme": Page(ROOT / "README.md", _readme, _readme_caption),
    "getting-started": Page(ROOT / "docs" / "getting-started.md", _getting_started,
                            _getting_started_caption),
    "training": Page(ROOT / "docs" / "getting-started.md", _training, _training_caption),
    "progress": Page(ROOT / "docs" / "guide" / "report.md", _progress, _progress_caption),
}


def excerpt(chosen: Sequence[Line]) -> list[str]:
    """The chosen lines in console order, ``...`` where the console has lines between."""
    out: list[str] = []
    last = None
    for ln in sorted(set(chosen), key=lambda ln: ln.index):
        if last is not None and ln.index != last + 1:
            out.append("...")
        out.append(ln.text)
        last = ln.index
    return out


def block(name: str, console: Sequence[str], run: dict[str, Any]) -> str:
    """A page's generated block, markers included."""
    page = PAGES[name]
    to_record = os.path.relpath(RECORD, page.path.parent)
    lines = excerpt(page.rule(tag(console), run))
    return "\n".join([START.format(name=name), "", "```", *lines, "```", "",
                      textwrap.fill(page.caption(run, to_record), 95), "", END])


def current_block(name: str) -> str | None:
    """The block a page holds now, markers included (None: the page has no markers)."""
    text = PAGES[name].path.read_text()
    head = START.format(name=name)
    if head not in text:
        return None
    start = text.index(head)
    return text[start:text.index(END, start) + len(END)]


def read_record(record: Path = RECORD) -> tuple[list[str], dict[str, Any]]:
    return ((record / "console.txt").read_text().splitlines(),
            json.loads((record / "run.json").read_text()))


def rewrite(record: Path = RECORD) -> list[str]:
    """Every page's block written again from the recording; the pages changed."""
    console, run = read_record(record)
    changed = []
    for name, page in PAGES.items():
        old = current_block(name)
        if old is None:
            raise SystemExit(f"{page.path.relative_to(ROOT)} has no '{START.format(name=name)}' "
                             f"marker: put one, and '{END}', where its excerpt goes")
        new = block(name, console, run)
        if new != old:
            page.path.write_text(page.path.read_text().replace(old, new))
            changed.append(str(page.path.relative_to(ROOT)))
    return changed


# --- the run ------------------------------------------------------------------------------

def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def record_run(extra: Sequence[str]) -> Path:
    """Run the README's command (and ``extra`` overrides) in a fresh folder, echo its console,
    and record it in RECORD (replacing the earlier recording)."""
    work = Path(tempfile.mkdtemp(prefix="autotune-excerpts-"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOTUNE_STORAGE", "AUTOTUNE_VERBOSE")}  # the default console
    env.update(PYTHONUNBUFFERED="1", AUTOTUNE_PROGRESS="lines", HF_HUB_OFFLINE="1")
    command = [*COMMAND, *extra]
    load = os.getloadavg()[0]
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *command], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    console = []
    for text in proc.stdout:
        print(text, end="", flush=True)
        console.append(text.rstrip("\n"))
    code = proc.wait()
    record(work / "studies" / STUDY, console, {
        "command": command, "date": date, "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2),
        "wall_s": round(time.monotonic() - began, 1), "exit_code": code})
    shutil.rmtree(work, ignore_errors=True)
    return RECORD


def record(study: Path, console: Sequence[str], run: dict[str, Any],
           into: Path = RECORD) -> None:
    """Keep a run in ``into``: its console, ``run`` (with the machine and the exported trial
    read from the study), and what the console was printed from."""
    if not (study / "study.db").exists():
        raise SystemExit(f"the run wrote no study (exit code {run.get('exit_code')}): "
                         "nothing recorded")
    shutil.rmtree(into, ignore_errors=True)
    (into / "trials").mkdir(parents=True)
    for name in ("study.db", "best.yaml", "autotune.log"):
        if (study / name).exists():
            shutil.copy(study / name, into / name)
    for result in sorted(study.glob("trials/*/result.json")):
        (into / "trials" / result.parent.name).mkdir()
        shutil.copy(result, into / "trials" / result.parent.name / "result.json")
    (into / "console.txt").write_text("\n".join(console) + "\n")
    run = {**run, "machine": _machine(study), "best_trial": _best_trial(study),
           "trials": _search_trials(study), "console": sizes(console)}
    (into / "run.json").write_text(json.dumps(run, indent=2) + "\n")


def _machine(study: Path) -> dict[str, Any]:
    import optuna

    from autotune.results.record import study_attrs

    s = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{study / 'study.db'}")
    dev = study_attrs(s).get("device") or {}
    return {"cpu": dev.get("device_name"), "cores": dev.get("cpu_count"),
            "memory_gb": dev.get("total_memory_gb"), "torch": dev.get("torch_version")}


def _search_trials(study: Path) -> int:
    """The trials the search ran (each has its console line; the same-training one has none)."""
    import optuna

    from autotune.results.record import trial_attrs

    s = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{study / 'study.db'}")
    return sum(trial_attrs(t).get("source") != "same_training" for t in s.get_trials())


def _best_trial(study: Path) -> int | None:
    import yaml

    best = study / "best.yaml"
    return yaml.safe_load(best.read_text()).get("best_trial") if best.exists() else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.excerpts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-record", action="store_true",
                    help=f"no run: rewrite the excerpts from {RECORD.relative_to(ROOT)}")
    ap.add_argument("overrides", nargs="*", help="after --: overrides that shorten the run")
    a = ap.parse_args(argv)
    if not a.from_record:
        record_run(a.overrides)
    changed = rewrite()
    print("rewrote: " + (", ".join(changed) or "nothing (the excerpts were current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
