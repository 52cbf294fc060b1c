"""The documentation site builds with warnings as errors, and the built pages list every
configuration key of the schema and every knob of the registry (a key or knob added to the
code appears without an edit; one the build dropped fails here)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

from autotune.core.knobs import KNOBS
from tests.conftest import ROOT
from tests.test_docs import SCHEMA_KEYS


def test_site_builds_strict_and_lists_every_key_and_knob(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    config_html = html.unescape((site / "reference" / "configuration" / "index.html").read_text())
    for key in sorted(SCHEMA_KEYS):
        assert f"<code>{key}</code>" in config_html, key
    knobs_html = html.unescape((site / "reference" / "knobs" / "index.html").read_text())
    for knob in KNOBS:
        assert f'id="{knob.name}"' in knobs_html and knob.doc in knobs_html, knob.name
    api_html = (site / "reference" / "api" / "index.html").read_text()
    for name in ("autotune.cli.api.tune", "autotune.production.runtime.Runtime",
                 "autotune.production.meter.Meter", "autotune.adapters.hf.tune",
                 # what the guides call and catch, rendered (not only listed in api.md)
                 "autotune.adapters.hf.training_arguments_kwargs",
                 "autotune.adapters.lightning.trainer_kwargs",
                 "autotune.adapters.lightning.dataloader_kwargs",
                 "autotune.production.verify.Verified", "autotune.cli.api.VerifyError",
                 "autotune.core.shipping.CannotTravel"):
        assert f'id="{name}"' in api_html, name
    # The Hugging Face page shows the tutorial's own code (highlighted: read without the tags).
    hf_page = (site / "guide" / "huggingface" / "index.html").read_text()
    hf_text = html.unescape(re.sub(r"<[^>]+>", "", hf_page))
    assert "tuned = hf.tune(trainer" in hf_text and "--8<--" not in hf_text
