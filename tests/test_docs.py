"""The documentation holds to the code (fast tier: no build, no study): the README is short and
keeps the commands CI runs; every configuration key and knob the prose names exists; the
generated references list every schema key and registry knob; the report screenshots were
taken from the current report renderer."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat

from autotune.core.knobs import KNOBS
from tests.conftest import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAIN_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -e . && "
                ".venv/bin/autotune workload=resnet18")
TEST_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
                ".venv/bin/python -m pytest")


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = _load(DOCS / "hooks" / "reference.py", "docs_reference")
SCHEMA_KEYS = {key for key, *_ in reference.config_keys()}
KNOB_NAMES = {k.name for k in KNOBS}


def _prose() -> dict[Path, str]:
    files = [README, *DOCS.rglob("*.md"), *(DOCS / "tutorials").glob("*.py")]
    texts = {p: p.read_text() for p in files}
    for nb_path in (DOCS / "tutorials").glob("*.ipynb"):
        nb = nbformat.read(nb_path, as_version=4)
        texts[nb_path] = "\n".join(c.source for c in nb.cells)
    return texts


def test_readme_is_short_and_keeps_the_commands_ci_runs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert MAIN_COMMAND in text and TEST_COMMAND in text
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text()


def test_readme_links_resolve_and_reach_the_hugging_face_page_in_one_step() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", README.read_text())
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link
    assert "docs/guide/huggingface.md" in links
    hf_page = (DOCS / "guide" / "huggingface.md").read_text()
    assert ('--8<-- "docs/tutorials/hf_trainer.py"' in hf_page
            or "<!-- code: docs/tutorials/hf_trainer.py (" in hf_page)


#: ``study.<x>`` after "best.yaml" on a line names a field of best.yaml's study section, which
#: the export writes (autotune/results/export.py, launch_export.py), not a configuration key.
_KEY = re.compile(r"(?<![\w./-])(knobs|study|window|memory|launch)\.([a-z_][a-z0-9_]*)(\*?)")


def test_every_key_the_prose_names_exists_in_the_schema_or_the_registry() -> None:
    export = "".join((ROOT / "autotune" / "results" / f).read_text()
                     for f in ("export.py", "launch_export.py"))  # best.yaml's sections
    missing = []
    for path, text in _prose().items():
        for line in text.splitlines():
            for m in _KEY.finditer(line):
                group, name, star = m.groups()
                key = f"{group}.{name}"
                if re.match(r"(py|db|yaml|json|md)\b", name):
                    continue  # a file name (knobs.py, study.db), not a key
                if star:
                    ok = any(k.startswith(key) for k in SCHEMA_KEYS)
                elif group == "knobs":
                    ok = name in KNOB_NAMES
                elif "best.yaml" in line[:m.start()] and f'"{name}"' in export:
                    ok = True
                else:
                    ok = key in SCHEMA_KEYS or any(k.startswith(key + ".") for k in SCHEMA_KEYS)
                if not ok:
                    missing.append(f"{path.relative_to(ROOT)}: {key}")
    assert not missing, missing


def test_the_generated_references_list_every_key_and_knob() -> None:
    config_page = reference.config_markdown()
    for key in SCHEMA_KEYS:
        assert f"| `{key}` |" in config_page, key
    knobs_page = reference.knobs_markdown()
    for name in KNOB_NAMES:
        assert f"\n## {name}\n" in knobs_page, name
    # Every key has its explanation (a field without metadata["help"] would show none).
    assert all(text for key, _, _, text in reference.config_keys()
               if not key.startswith("knobs.")), "a schema key without metadata help"


def test_report_screenshots_were_taken_from_the_current_renderer() -> None:
    take = _load(DOCS / "shots" / "take.py", "docs_shots_take")
    meta = json.loads((DOCS / "shots" / "shots.json").read_text())
    assert meta["renderer"] == take.RENDERER
    assert meta["renderer_sha256"] == take.renderer_hash(), (
        "the report's renderer changed since the screenshots were taken: run "
        "`python docs/shots/take.py` and commit the new PNGs and shots.json")
    for name in meta["files"]:
        assert (DOCS / "shots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"shots/{name}" in (DOCS / "guide" / "report.md").read_text()
