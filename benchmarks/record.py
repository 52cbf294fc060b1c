"""What a benchmark's ``--record`` writes: a section of docs/benchmarks.md, newest first, that
quotes the command as it ran. Every benchmark that records goes through here."""

from __future__ import annotations

import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def command(module: str, argv: Sequence[str] | None = None) -> str:
    """The command a section quotes: ``python -m benchmarks.<name>`` and its arguments (this
    process's own, ``sys.argv[1:]``, unless ``argv`` is given), as a shell would take them."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", "-m", module, *(shlex.quote(str(a)) for a in args)])


def machine(best: Mapping[str, Any]) -> str:
    """The machine line a study's section opens with, from its best.yaml's ``device``."""
    return (f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
            f"device {best['device']['type']} ({best['device']['name']}).")


def prepend_section(text: str, path: Path = BENCHMARKS_MD) -> None:
    """Put ``text`` (a section starting with ``## ``) after the page's introduction, above
    every earlier section, ending in a blank line: without it the next heading is read into a
    closing table, and the anchors other pages link to are lost (the docs build fails). A page
    that does not exist yet (a test's) gets the section alone."""
    text = text.strip("\n") + "\n\n"
    if not text.startswith("## "):
        raise ValueError(f"a section of {path.name} starts with '## ': {text[:60]!r}")
    if not path.exists():
        path.write_text(text)
        return
    head, sep, rest = path.read_text().partition("\n## ")
    path.write_text(head + "\n" + text + sep.lstrip("\n") + rest if sep else head + "\n" + text)


def publish(lines: Sequence[str], record: bool) -> None:
    """Print a benchmark's section; with ``--record``, put it at the top of the page too."""
    text = "\n".join(lines)
    print(text)
    if record:
        prepend_section(text)
