"""The reference pages are committed as generated (configuration keys, knobs, the Python
API), so that GitHub shows them as the site does; each is what docs/hooks/reference.py writes
from today's code (on GitHub they were stubs)."""

from __future__ import annotations

from tests.test_docs import reference


def test_the_committed_reference_pages_are_current() -> None:
    stale = reference.stale()
    assert not stale, f"{stale}: not what today's code generates: run python docs/hooks/reference.py"


def test_the_github_api_page_documents_each_object_the_site_renders() -> None:
    page = reference.api_markdown()
    site = reference.api_site_markdown()
    for line in site.splitlines():
        if line.startswith("::: "):
            assert f"### `{line[4:]}`" in page, line
    assert "### `autotune.production.runtime.Runtime`" in page
    assert "#### `autotune.production.runtime.Runtime.dataloader`" in page
    assert "#### `autotune.adapters.hf.tune`" in page and ":::" not in page
