"""best.yaml read back for a production run: ``load_best`` checks the document (schema, every
knob present) and warns where this machine is not the one that measured it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.core.knobs import KNOBS
from autotune.production.environment_check import warn_if_environment_changed
from autotune.results.export import SCHEMA

#: Knobs added after schema 1, and the value that leaves a best.yaml written before them as it
#: was measured (None: cpu_threads untouched, torch's default threads; the collator's own padding).
LATER_KNOBS: dict[str, Any] = {"cpu_threads": None, "pad_to_multiple_of": None}


@dataclass(frozen=True)
class BestConfig:
    """A study's result, read back for a production run."""

    knobs: dict[str, Any]
    workload: str | None
    metrics: dict[str, Any]
    document: dict[str, Any]
    #: Where it was read from (a best.yaml's path; a Hydra config's name): the other answer's
    #: file (best.yaml's ``training.other.file``) lies beside it.
    source: str = ""


def load_best(path: str | os.PathLike[str], check_environment: bool = True) -> BestConfig:
    """Read best.yaml. ``Training(workload, best.knobs, device)`` or ``autotune.Runtime(best)``
    then applies exactly the measured configuration, through the same code the trial window
    used. With ``check_environment`` it warns (one ``EnvironmentChanged`` warning naming each
    difference) where this machine's device or library versions are not the measured ones."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML ({exc}); expected an autotune best.yaml") from exc
    best = best_from_document(doc, str(path))
    if check_environment:
        warn_if_environment_changed(best.document, str(path))
    return best


def best_from_document(doc: Any, source: str) -> BestConfig:
    """A best.yaml document (or the same mapping from a Hydra config) checked and wrapped.
    Schema 1 files from before any later addition load unchanged."""
    if not isinstance(doc, dict) or doc.get("schema", SCHEMA) != SCHEMA or not isinstance(
            doc.get("knobs"), dict):
        raise ValueError(
            f"{source} is not an autotune best.yaml (schema {SCHEMA}): expected a mapping with "
            f"'schema: {SCHEMA}' and a 'knobs' mapping, as studies/<name>/best.yaml has")
    knobs = {**LATER_KNOBS, **doc["knobs"]}
    missing = [k.name for k in KNOBS if k.name not in knobs]
    if missing:
        raise ValueError(f"{source}: knobs missing: {', '.join(missing)}")
    return BestConfig(knobs, doc.get("workload"), doc.get("metrics") or {}, {**doc, "knobs": knobs},
                      source)
