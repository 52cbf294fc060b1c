"""The documentation promises only what a user has (fast tier: no build, no study).

- Every exception or warning of autotune's that a page or the README names can be caught as
  ``autotune.<Name>``: a page that says ``except autotune.CannotTravel`` must not raise
  AttributeError.
- Every autotune name a page's code calls (``from autotune.adapters.hf import X``,
  ``autotune.X``, ``hf.X``, ``at_lightning.X``) is in the generated API reference.
- No page, tutorial or docstring names what a clone of this repository does not have: a
  folder outside it (``../shared``), the project's private reading list ("seed 004"), its
  issue tracker ("issue 21") or its GPU sessions ("a loan"). Say the fact, or cite a public
  source by its URL.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import nbformat
import pytest

import autotune
from tests.conftest import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _pages() -> dict[Path, str]:
    """Every page a user reads: README, docs/**/*.md, the tutorials' code and notebook."""
    files = [README, *sorted(DOCS.rglob("*.md")), *sorted((DOCS / "tutorials").glob("*.py"))]
    texts = {p: p.read_text() for p in files}
    for nb_path in (DOCS / "tutorials").glob("*.ipynb"):
        nb = nbformat.read(nb_path, as_version=4)
        texts[nb_path] = "\n".join(c.source for c in nb.cells)
    return texts


def _exception_classes() -> set[str]:
    """Names of the exception and warning classes autotune's own code defines (read from its
    source: importing every module would load every framework)."""
    bases: dict[str, list[str]] = {}
    for path in (ROOT / "autotune").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names = [b.id if isinstance(b, ast.Name) else
                         b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]
                bases.setdefault(node.name, []).extend(names)
    builtin = {n for n, v in vars(builtins).items()
               if isinstance(v, type) and issubclass(v, BaseException)}

    def is_exc(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in builtin:
            return True
        return name not in seen and any(is_exc(b, seen | {name}) for b in bases.get(name, []))

    return {n for n in bases if is_exc(n)}


def test_every_exception_a_page_names_is_importable_from_autotune() -> None:
    ours = _exception_classes()
    assert {"CannotTravel", "WorkloadError", "VerifyError", "CouldNotMeasure"} <= ours
    named: dict[str, str] = {}
    for path, text in _pages().items():
        for word in set(re.findall(r"\b[A-Z][A-Za-z]+\b", text)) & ours:
            named.setdefault(word, str(path.relative_to(ROOT)))
    assert named, "no page names an exception: the scan is broken"
    missing = {n: where for n, where in named.items()
               if n not in autotune.__all__ or not hasattr(autotune, n)}
    assert not missing, f"named in a page, not importable as autotune.<name>: {missing}"
    for name in named:
        assert issubclass(getattr(autotune, name), BaseException), name


def test_what_autotune_verify_raises_is_the_exported_verify_error() -> None:
    from autotune.production import verify as rounds

    assert issubclass(autotune.VerifyError, rounds.VerifyError)
    assert issubclass(autotune.VerifyError, autotune.StudyError)
    assert issubclass(autotune.CannotTravel, autotune.WorkloadError)


#: How a page's code refers to autotune's modules: ``import autotune``, the adapters' usual
#: aliases (the pages' own), and ``from autotune.x import a, b``.
ALIASES = {"autotune": "autotune", "hf": "autotune.adapters.hf",
           "at_lightning": "autotune.adapters.lightning"}
_FROM = re.compile(r"^\s*from (autotune(?:\.\w+)*) import (?:\(([^)]*)\)|([\w, ]+))", re.M)
_ATTR = re.compile(r"(?<![\w.])(autotune|hf|at_lightning)\.([A-Za-z_]\w*)\b(?!\.md|\.py|\.yaml)")


def _called() -> dict[tuple[str, str], str]:
    """(module, name) for each autotune name a page's code uses, with the page."""
    out: dict[tuple[str, str], str] = {}
    for path, text in _pages().items():
        if path.name in ("changelog.md", "benchmarks.md", "contributing.md"):
            continue  # history and the code's own layout, not instructions to a user
        if path.parent == DOCS / "reference":
            continue  # generated from the code itself (docs/hooks/reference.py)
        if path.suffix in (".py", ".ipynb"):
            code = text
        else:  # the Python blocks, and inline code in the prose
            blocks = re.findall(r"```(\w*)\n(.*?)```", text, re.S)
            prose = re.sub(r"```.*?```", "", text, flags=re.S)
            code = "\n".join([b for lang, b in blocks if lang in ("", "python", "py")]
                             + re.findall(r"`([^`\n]+)`", prose))
        for module, grouped, names in _FROM.findall(code):
            for item in (grouped or names).split(","):
                name = item.split(" as ")[0].strip()  # "lightning as at_lightning"
                if name and name not in ("lightning", "hf"):
                    out.setdefault((module, name), str(path.relative_to(ROOT)))
        for alias, name in _ATTR.findall(code):
            if name not in ("adapters", "__version__", "log"):  # autotune.log: a file
                out.setdefault((ALIASES[alias], name), str(path.relative_to(ROOT)))
    return out


def _documented() -> set[str]:
    """Dotted names the API reference renders: ``::: x.y`` and the members it lists (the
    site's page, from docs/hooks/api_page.py's ``API``)."""
    from tests.test_docs import reference

    text = reference.api_site_markdown() + "\n"
    names: set[str] = set()
    for target, options in re.findall(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.M):
        names.add(target)
        members = re.search(r"members: \[([^\]]*)\]", options)
        if members:
            names |= {f"{target}.{m.strip()}" for m in members.group(1).split(",")}
    return names


def test_every_name_a_page_calls_is_in_the_api_reference() -> None:
    documented = _documented()
    called = _called()
    assert ("autotune.adapters.hf", "training_arguments_kwargs") in called
    missing = []
    for (module, name), page in sorted(called.items()):
        obj = getattr(importlib.import_module(module), name, None)
        if obj is None:
            missing.append(f"{page}: {module}.{name} does not exist")
            continue
        if isinstance(obj, type(autotune)):  # a module (autotune.adapters): not a call
            continue
        home = f"{getattr(obj, '__module__', module)}.{getattr(obj, '__qualname__', name)}"
        if not ({home, f"{module}.{name}"} & documented):
            missing.append(f"{page}: {module}.{name} ({home}) is not in the API reference "
                           "(docs/hooks/api_page.py's API)")
    assert not missing, "\n".join(missing)


#: What a clone of this repository does not have, as pages have named it.
PRIVATE = [
    (re.compile(r"\.\./shared|/work/shared"), "a folder outside the repository"),
    (re.compile(r"\bseeds?[ _/]*0\d\d|\bthe seeds'|\bseeds/", re.I), "the private reading list"),
    (re.compile(r"\bissues? #?\d+|\bissue #\d+", re.I), "an issue of the project's tracker"),
    (re.compile(r"\bloans?\b|\blent\b", re.I), "the project's GPU sessions"),
]


def _private(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if "github.com/" in line and re.search(r"\bissues? #?\d+", line, re.I):
            line = re.sub(r"\bissues? #?\d+", "", line, flags=re.I)  # a public issue, cited
        for pattern, what in PRIVATE:
            m = pattern.search(line)
            if m:
                found.append(f"{n}: {m.group(0)!r} ({what})")
    return found


@pytest.mark.parametrize("where", ["pages", "code"])
def test_no_page_or_docstring_names_what_a_clone_does_not_have(where: str) -> None:
    if where == "pages":
        texts = _pages()
    else:  # the package's docstrings, comments and messages, and the examples users copy
        files = [*(ROOT / "autotune").rglob("*.py"), *(ROOT / "autotune").rglob("*.yaml"),
                 *(ROOT / "examples").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
        texts = {p: p.read_text() for p in files}
    bad = [f"{p.relative_to(ROOT)}:{hit}" for p, text in texts.items() for hit in _private(text)]
    assert not bad, "\n".join(bad)


def test_the_private_reference_check_can_fail() -> None:
    assert _private("the reference workload of `../shared/seeds/004_*`")
    assert _private("as issue 21 reports") and _private("seed 003's t2-t1")
    assert _private("inside a short GPU loan")
    assert not _private("sampler seeds [0, 1, 2]; the window seed 0")
    assert not _private("(https://github.com/pytorch/pytorch/issues/179291, issue 179291)")


# --- links that work where the repository is read (GitHub) and on the site -------------------

_MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    each space a hyphen (runs are not collapsed, unlike mkdocs' default)."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _slugs(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_link_in_a_page_resolves_where_the_repository_is_read() -> None:
    """The site checks its own links (mkdocs build --strict); GitHub checks none, so this
    test does: each relative link names a file of the repository, and an anchor into a page
    names one of its headings as GitHub spells them. The generated reference pages are
    committed as short pages, so a link to them resolves too."""
    broken = []
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in _MD_LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif (anchor and path.suffix == ".md" and path.parent.name != "reference"
                  and anchor not in _slugs(path)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading on GitHub)")
    assert not broken, "\n".join(broken)


def test_the_github_slug_is_githubs() -> None:
    assert _github_slug("Many workers, clusters and torchrun") == "many-workers-clusters-and-torchrun"
    assert (_github_slug("Trials that span nodes (`launch.nnodes`)")
            == "trials-that-span-nodes-launchnnodes")
    assert _github_slug("a - b") == "a---b"


def test_the_site_links_files_outside_the_docs_to_the_repository() -> None:
    """On the site, a link to examples/x.py becomes the file's page in the repository where
    ``repo_url`` is set (the main branch, or the one ``edit_uri`` edits); else its path."""
    from types import SimpleNamespace

    from tests.test_docs import reference

    page = SimpleNamespace(file=SimpleNamespace(src_uri="guide/production.md"))
    md = "see [the script](../../examples/train_plain.py#L10) and [faq](faq.md)"
    local = reference.on_page_markdown(md, page, {"docs_dir": str(DOCS)}, None)
    assert local == "see the script (`examples/train_plain.py`) and [faq](faq.md)"
    repo = {"docs_dir": str(DOCS), "repo_url": "https://github.com/o/autotune/",
            "edit_uri": "edit/dev/docs/"}
    linked = reference.on_page_markdown(md, page, repo, None)
    assert linked == ("see [the script](https://github.com/o/autotune/blob/dev/"
                      "examples/train_plain.py#L10) and [faq](faq.md)")
    assert reference.on_config({"repo_url": "https://github.com/o/autotune"})["edit_uri"] \
        == "edit/main/docs/"
