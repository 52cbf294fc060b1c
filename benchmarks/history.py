"""docs/benchmarks.md, newest first: a benchmark's section goes above every earlier one."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def prepend_section(text: str, path: Path = BENCHMARKS_MD) -> None:
    """Put ``text`` (a section starting with ``## ``) after the page's introduction, ending
    in a blank line: without it the next heading is read into a closing table, and the
    anchors other pages link to are lost (the docs build fails)."""
    text = text.rstrip("\n") + "\n\n"
    head, sep, rest = path.read_text().partition("\n## ")
    path.write_text(head + "\n" + text + sep.lstrip("\n") + rest if sep else head + "\n" + text)
