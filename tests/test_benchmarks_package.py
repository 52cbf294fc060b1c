"""benchmarks/ is a package, run as ``python -m benchmarks.<name>`` from the repository's root:
no module of it edits ``sys.path`` to find autotune or its siblings, and importing any of them
runs nothing (each runs under its ``if __name__ == "__main__":`` guard)."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
_SYS_PATH = re.compile(r"\bsys\.path\b|\bfrom sys import\b[^\n]*\bpath\b")


def _sys_path_lines(source: str) -> list[int]:
    """The lines that name ``sys.path`` (an edit, or the start of one)."""
    return [n for n, line in enumerate(source.splitlines(), 1) if _SYS_PATH.search(line)]


def _runs_on_import(source: str) -> list[str]:
    """Top-level statements that do work when the module is imported: a call, a loop, a
    ``with``, outside the ``__main__`` guard (definitions, imports, constants and docstrings
    are what a module's top level may hold)."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Expr, ast.For, ast.While, ast.With, ast.If, ast.Try)):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            out.append(f"line {node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return out


def _modules() -> list[str]:
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__")


def test_benchmarks_is_a_package_and_no_file_of_it_edits_sys_path() -> None:
    assert (BENCHMARKS / "__init__.py").exists()
    files = sorted(BENCHMARKS.rglob("*.py"))
    assert len(files) > 5, "no benchmarks found: the scan is broken"
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in files for n in _sys_path_lines(p.read_text())]
    assert not bad, "run it as python -m benchmarks.<name> instead: " + ", ".join(bad)


def test_the_checks_can_fail() -> None:
    assert _sys_path_lines("import sys\nsys.path.insert(0, str(ROOT))\n") == [2]
    assert _sys_path_lines("from sys import path\npath.append('.')\n") == [1]
    assert not _sys_path_lines("import sys\nprint(sys.argv)\n")
    assert _runs_on_import("for x in (1, 2):\n    print(x)\n")
    assert _runs_on_import("main()\n")
    assert not _runs_on_import('"""doc"""\nX = 1\ndef main():\n    pass\n'
                               'if __name__ == "__main__":\n    main()\n')


@pytest.mark.parametrize("name", _modules())
def test_every_benchmark_imports_as_a_package_module_without_running(
        name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source = (BENCHMARKS / f"{name}.py").read_text()
    assert not _runs_on_import(source), f"benchmarks/{name}.py runs on import"
    monkeypatch.setattr(sys, "argv", ["benchmarks-import-check"])  # argparse at import: fails
    module = importlib.import_module(f"benchmarks.{name}")
    assert Path(module.__file__ or "").resolve() == BENCHMARKS / f"{name}.py"
    assert capsys.readouterr().out == "", f"importing benchmarks.{name} printed"


def test_a_record_goes_above_every_earlier_section_and_quotes_the_command(
        tmp_path: Path) -> None:
    from benchmarks.record import command, prepend_section

    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nIntro.\n\n## Old (2026-11-22)\n\n| a |\n|---|\n| 1 |\n")
    prepend_section(f"## New (2026-11-29)\n\n    {command('benchmarks.x', ['a b', '--y'])}\n\n"
                    "| b |\n|---|\n| 2 |", page)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nIntro.\n\n## New (2026-11-29)\n\n"
                           "    python -m benchmarks.x 'a b' --y\n")
    assert "| 2 |\n\n## Old (2026-11-22)" in text  # a blank line ends the new table
    with pytest.raises(ValueError):
        prepend_section("Not a section", page)
    prepend_section("## Alone", tmp_path / "new.md")
    assert (tmp_path / "new.md").read_text() == "## Alone\n\n"
