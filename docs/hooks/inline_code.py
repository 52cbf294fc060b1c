"""Code the pages show from a file (a tutorial, an example's section), copied into the page so
that GitHub shows it as the site does, and kept equal to the file the test suite runs.

    python docs/hooks/inline_code.py            # copy each file into the pages that show it

A page shows a file between markers, as a fenced block:

    <!-- code: docs/tutorials/quickstart.py (python docs/hooks/inline_code.py copies it) -->
    ```python
    ...the file...
    ```
    <!-- /code -->

``path:name`` shows the lines between ``# --8<-- [start:name]`` and ``# --8<-- [end:name]`` of
the file (pymdownx.snippets' sections, which the file keeps). A fenced block holding only a
snippet line (``--8<-- "path"``: on GitHub, that line and no code) is turned into such a block
by the same command. ``tests/test_docs_code.py`` fails while a copy differs from its file or a
page still shows a snippet line.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
START = "<!-- code: {source} (python docs/hooks/inline_code.py copies it) -->"
END = "<!-- /code -->"

_BLOCK = re.compile(r"<!-- code: (\S+) \(python docs/hooks/inline_code\.py copies it\) -->\n"
                    r"```(\w*)\n(.*?)```\n" + re.escape(END), re.S)
_SNIPPET = re.compile(r'^```(\w*)\n--8<-- "([^"]+)"\n```$', re.M)


def source_text(source: str) -> str:
    """The code a page shows for ``source`` (``path`` or ``path:section``), newline-ended."""
    path, _, section = source.partition(":")
    text = (ROOT / path).read_text()
    if section:
        m = re.search(rf"^[ \t]*# --8<-- \[start:{re.escape(section)}\]\n(.*?)"
                      rf"^[ \t]*# --8<-- \[end:{re.escape(section)}\]", text, re.S | re.M)
        if m is None:
            raise ValueError(f"{path} has no section '{section}' (# --8<-- [start:{section}])")
        text = m.group(1)
    lines = [ln for ln in text.splitlines() if not re.match(r"^\s*# --8<-- \[(start|end):", ln)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _block(source: str, lang: str) -> str:
    return f"{START.format(source=source)}\n```{lang}\n{source_text(source)}```\n{END}"


def rendered(text: str) -> str:
    """``text`` with every snippet block turned into a copy and every copy made current."""
    text = _SNIPPET.sub(lambda m: _block(m.group(2), m.group(1)), text)
    return _BLOCK.sub(lambda m: _block(m.group(1), m.group(2)), text)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def shown(text: str) -> list[str]:
    """The sources a page shows in copies."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def stale() -> list[str]:
    """The pages whose copies differ from their files, or that show a snippet line."""
    return [str(p.relative_to(ROOT)) for p in pages() if rendered(p.read_text()) != p.read_text()]


def write(only: list[Path] | None = None) -> list[str]:
    written = []
    for page in only or pages():
        text = page.read_text()
        if rendered(text) != text:
            page.write_text(rendered(text))
            written.append(str(page.relative_to(ROOT)))
    return written


if __name__ == "__main__":
    import sys

    chosen = [Path(a).resolve() for a in sys.argv[1:]] or None
    print("wrote: " + (", ".join(write(chosen)) or "nothing (every copy was current)"))
