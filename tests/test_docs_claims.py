"""The guides' claims about the code agree with the code (fast tier: no build, no study).

Each knob's class (speed, numerics, training) is the registry's (``autotune/core/knobs.py``)
wherever a page states it: choosing.md's table has a row for every knob and the class the
registry gives it, and the pages that list the knobs of class training list exactly those.
The pages called ``comm_hook`` and ``padding_free`` training-changing by hand where the
registry classes them numerics, and ``broadcast_buffers`` (training) left out.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from autotune.core.knobs import KNOBS
from tests.conftest import ROOT

DOCS = ROOT / "docs"
CLASSES = {k.name: k.effect for k in KNOBS}
TRAINING = {k.name for k in KNOBS if k.effect == "training"}


def table_classes(text: str) -> dict[str, tuple[str, bool]]:
    """choosing.md's knob table: each knob named in a row's first cell -> (the class its third
    cell starts with, whether the knob is bold)."""
    out: dict[str, tuple[str, bool]] = {}
    head = text.index("| knobs | what they speed up | class: what they do to training |")
    for row in text[head:].splitlines()[2:]:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip("|").split("|")]
        m = re.match(r"\**(speed|numerics|training)\**:", cells[2])
        assert m, f"choosing.md: a row whose class is not stated first: {row[:80]}"
        for bold, name in re.findall(r"(\*\*)?`([a-z_0-9]+)`", cells[0]):
            out[name] = (m.group(1), bool(bold))
    return out


def test_choosing_states_every_knob_in_the_registrys_class() -> None:
    rows = table_classes((DOCS / "guide" / "choosing.md").read_text())
    assert set(rows) - set(CLASSES) == set(), "a row names no knob of the registry"
    assert set(CLASSES) - set(rows) == set(), "knobs without a row in choosing.md's table"
    wrong = {n: (c, CLASSES[n]) for n, (c, _) in rows.items() if c != CLASSES[n]}
    assert not wrong, f"(the page's class, the registry's): {wrong}"
    bold = {n for n, (_, b) in rows.items() if b}
    assert bold == TRAINING, "bold marks exactly the knobs of class training"


def _listed_after(text: str, phrase: str) -> set[str]:
    """The knob names in backticks in the sentence that starts at ``phrase``."""
    at = text.index(phrase)
    sentence = text[at:text.index(").", at) + 1]
    return {n for n in re.findall(r"`([a-z_0-9]+)`", sentence) if n in CLASSES}


def test_pages_that_list_the_training_knobs_list_the_registrys() -> None:
    faq = (DOCS / "guide" / "faq.md").read_text()
    assert _listed_after(faq, "keeps every knob the registry classes as") == TRAINING
    start = (DOCS / "getting-started.md").read_text()
    assert _listed_after(start, "*training* (") == TRAINING


#: A section cited by its page and title: ``README "Layout"``, ``docs/benchmarks.md "Busy
#: machines"`` (a page named alone is looked up beside the citing file, then under docs/).
_CITED = re.compile(r'\b(README|[\w./-]+\.md):? "([^"\n]{3,120})"')


THIS = "tests/test_docs_claims.py"  # its own examples cite missing sections on purpose


def cited_sections(path: str, text: str) -> list[tuple[int, str, str]]:
    """(line, the page's path from the root, the title) for each section ``text`` cites."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for page, title in _CITED.findall(line):
            page = "README.md" if page == "README" else page
            if not (ROOT / page).exists():
                near = (ROOT / path).parent / page
                page = (near.relative_to(ROOT).as_posix() if near.exists() else f"docs/{page}")
            out.append((n, page, title))
    return out


def headings(page: Path) -> set[str]:
    return {re.sub(r"^#+\s*", "", line).strip() for line in page.read_text().splitlines()
            if line.startswith("#")} if page.exists() else set()


def test_every_section_a_file_cites_exists() -> None:
    """studies/README.md cited README "Using the result in production" and pyproject.toml
    README "Layout", sections the README no longer has."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    missing = []
    for f in files:
        if not f.endswith((".py", ".md", ".toml", ".yaml", ".yml", ".sh")) or f == THIS:
            continue
        for n, page, title in cited_sections(f, (ROOT / f).read_text()):
            if not any(h.startswith(title) for h in headings(ROOT / page)):
                missing.append(f'{f}:{n}: {page} "{title}"')
    assert not missing, missing


def commands(text: str, target: str) -> list[frozenset[str]]:
    """The overrides of each ``autotune workload._target_=<target> ...`` command in ``text``
    (continuation lines joined, comments and ``PYTHONPATH=.`` dropped)."""
    joined = re.sub(r"\\\\?\n\s*", " ", text)  # a shell's (or a docstring's) continuation
    out = []
    for m in re.finditer(rf"autotune (workload\._target_={re.escape(target)}[^\n#`]*)", joined):
        out.append(frozenset(m.group(1).split()))
    return out


def test_an_examples_study_command_is_the_one_its_guide_and_its_measured_run_state() -> None:
    """examples/fsdp_train.py said memory.limit_gb=1.6 where sharding.md and the measured run
    in benchmarks.md say 1.7."""
    example = commands((ROOT / "examples" / "fsdp_train.py").read_text(),
                       "examples.fsdp_train.LlamaWorkload")
    assert len(example) == 1
    for page in ("guide/sharding.md", "benchmarks.md"):
        stated = commands((DOCS / page).read_text(), "examples.fsdp_train.LlamaWorkload")
        assert example[0] in stated, (page, sorted(example[0]), [sorted(c) for c in stated])


#: A speedup with its interval, as the pages and the benchmarks write it: "2.03x, 95% CI
#: 1.31-3.15x", "1.18x (95% CI 1.14-1.21x", "2.62x (1.87-3.67)".
_FIGURE = re.compile(r"(\d+(?:\.\d+)?)x,? \(?(95% CI )?(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)x?")


def figures(text: str, stated_only: bool = False) -> set[tuple[float, float, float]]:
    """The (speedup, low, high) figures of ``text``, lines joined; ``stated_only``: those the
    prose states with "95% CI", outside code, generated excerpts and quoted messages."""
    if stated_only:
        text = re.sub(r"<!-- (excerpt|code):.*?<!-- /(excerpt|code) -->", "", text, flags=re.S)
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        text = re.sub(r'"[^"]*"', '""', " ".join(text.split()))
    text = " ".join(text.split())
    return {(float(p), float(lo), float(hi)) for p, ci, lo, hi in _FIGURE.findall(text)
            if ci or not stated_only}


def test_every_speedup_a_guide_states_is_a_measured_one() -> None:
    """A speedup and interval a guide states is one of the benchmark pages' (their record has
    the command, machine and date). diagnosis.md stated 1.18x (1.14-1.21x) with its command
    and no benchmark record; report.md stated a screenshot's headline that was not the
    screenshot's."""
    measured = figures((DOCS / "benchmarks.md").read_text()
                       + (DOCS / "benchmarks-current.md").read_text())
    pages = [ROOT / "README.md", DOCS / "index.md", DOCS / "getting-started.md",
             *sorted((DOCS / "guide").glob("*.md"))]
    stray = {f"{p.relative_to(ROOT)}: {f}" for p in pages
             for f in figures(p.read_text(), stated_only=True) - measured}
    assert not stray, sorted(stray)


def files_listed_twice(text: str) -> list[str]:
    """The first cells a table headed "| file |" holds more than once."""
    twice = []
    for table in re.findall(r"^\| file \|.*\n\|[-| ]+\|\n((?:\|.*\n?)*)", text, re.M):
        cells = [row.split("|")[1].strip() for row in table.splitlines()]
        twice += sorted({c for c in cells if cells.count(c) > 1})
    return twice


def test_no_table_of_files_lists_one_twice() -> None:
    """getting-started's table of what a study writes had two best-same-training.yaml rows."""
    twice = {str(p.relative_to(ROOT)): files_listed_twice(p.read_text())
             for p in [ROOT / "README.md", ROOT / "studies" / "README.md", *DOCS.rglob("*.md")]}
    assert not {p: t for p, t in twice.items() if t}


def test_the_checks_can_fail() -> None:
    table = ("| knobs | what they speed up | class: what they do to training |\n|---|---|---|\n"
             "| `comm_hook` | x | **training**: y |\n| **`batch_size`** | x | **training**: y |\n")
    assert table_classes(table) == {"comm_hook": ("training", False),
                                    "batch_size": ("training", True)}
    assert _listed_after("a *training* (`batch_size`, `amp`: what).", "*training* (") == {
        "batch_size", "amp"}
    cites = cited_sections("pyproject.toml", '# rules (README "Layout"), x docs/guide/faq.md "Why"')
    assert [(p, t) for _, p, t in cites] == [("README.md", "Layout"), ("docs/guide/faq.md", "Why")]
    assert "Layout" not in headings(ROOT / "README.md")
    assert figures("ran 1.18x (95% CI\n1.14-1.21x, 6 rounds); \"2.0x, 95% CI 1.0-3.0x\"",
                   stated_only=True) == {(1.18, 1.14, 1.21)}
    assert figures("| 2.62x (1.87-3.67) |") == {(2.62, 1.87, 3.67)}
    assert files_listed_twice("| file | what |\n|---|---|\n| `a` | x |\n| `b` | y |\n"
                              "| `a` | z |\n") == ["`a`"]
    assert commands("autotune workload._target_=a.B x=1 \\\n    y=2  # 3:00\n", "a.B") == [
        frozenset({"workload._target_=a.B", "x=1", "y=2"})]
