"""Code a page shows from a file is on the page itself, equal to the file the suite runs, so
that GitHub shows what the site shows (on GitHub the tutorial pages showed their
``--8<--`` include lines and no code). ``python docs/hooks/inline_code.py`` writes the copies."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT


def _inline() -> ModuleType:
    name = "docs_inline_code"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs/hooks/inline_code.py")
        assert spec and spec.loader
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


#: Pages whose owners were editing them when the copies came in (2026-12-01): still shown by
#: include lines until ``python docs/hooks/inline_code.py`` is run on them; then remove them
#: here (the test says when a page no longer needs to be listed).
PENDING: set[str] = set()


def test_every_copy_equals_its_file_and_no_page_shows_an_include_line() -> None:
    inline = _inline()
    stale = set(inline.stale())
    assert not stale - PENDING, (
        f"{sorted(stale - PENDING)}: a copy differs from its file, or a page shows an include "
        "line: run python docs/hooks/inline_code.py")
    assert not PENDING - stale, f"{sorted(PENDING - stale)}: current now, drop from PENDING"


def test_the_tutorials_the_suite_runs_are_shown_whole() -> None:
    inline = _inline()
    for page, source in (("getting-started.md", "docs/tutorials/quickstart.py"),
                         ("guide/lightning.md", "docs/tutorials/lightning_module.py"),
                         ("guide/huggingface.md", "docs/tutorials/hf_trainer.py"),
                         ("guide/finetuning.md", "docs/tutorials/finetune_sft.py")):
        assert source in inline.shown((ROOT / "docs" / page).read_text()), page


def test_the_check_can_fail(tmp_path: Path) -> None:
    inline = _inline()
    page = ("x\n\n" + inline.START.format(source="docs/tutorials/quickstart.py")
            + "\n```python\nprint('an old copy')\n```\n" + inline.END + "\n")
    assert inline.rendered(page) != page
    assert "print('an old copy')" not in inline.rendered(page)
    assert inline.rendered(inline.rendered(page)) == inline.rendered(page)
    snippet = '```python\n--8<-- "examples/own_loop.py:model"\n```\n'
    out = inline.rendered(snippet)
    assert "--8<--" not in out and "def datasets(" in out
