"""best.yaml read back for a production run: ``load_best`` checks the document (schema, every
knob present) and warns where this machine is not the one that measured it."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
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


class ChangesTraining(UserWarning):
    """The configuration applied trains another model than the user's run did (a larger
    batch, another optimizer): said once as it is applied, with the learning-rate rule."""


def warn_training_changes(doc: Mapping[str, Any], stacklevel: int = 3) -> bool:
    """Say, as an answer is applied, what it changes in the user's training (best.yaml's
    ``training.this.changes``) and the learning-rate rule that goes with it, and where the
    answer that keeps the training is: applying it used to be silent (hf.apply, Lightning's
    prepare_module, Runtime) although the summary and best.yaml said it. True where it warned."""
    section = doc.get("training") or {}
    this = section.get("this") or {}
    changes = this.get("changes") or {}
    if not changes:
        return False
    other = section.get("other") or {}
    keeps = (f" {other['file']} (trial {other['trial']}) is the fastest that trains the same "
             "model as yours." if other and not other.get("changes") else "")
    rule = f"; {this['learning_rate']}" if this.get("learning_rate") else ""
    warnings.warn(f"autotune: this configuration changes your training: "
                  f"{'; '.join(map(str, changes.values()))}{rule}.{keeps}", ChangesTraining,
                  stacklevel=stacklevel)
    return True
