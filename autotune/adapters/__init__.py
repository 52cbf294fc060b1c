"""Framework adapters: a LightningModule or a transformers model as an autotune Workload, and
the study's result handed back in the framework's own terms (Trainer / TrainingArguments).

Import-light on purpose: ``autotune`` imports without Lightning or Transformers installed; each
adapter module imports its framework itself (``pip install -e '.[lightning]'`` / ``'.[hf]'``).
What they share lives here: reading a best.yaml in any of its forms, resolving the user's
dotted paths (best.yaml's framework files are written by
``autotune.results.export`` through ``Workload.framework_exports``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any

from autotune.core.workload import WorkloadError, resolve_target
from autotune.production.best import load_best

log = logging.getLogger("autotune")

#: host_allocator=retain as glibc environment variables (what ``mallopt`` sets in a trial):
#: a framework's process cannot call mallopt before its loader forks, the environment can.
RETAIN_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


def best_document(best: Any) -> dict[str, Any]:
    """best.yaml's document from a path, a ``BestConfig`` (``autotune.load_best``) or the dict."""
    if isinstance(best, (str, os.PathLike)):
        return dict(load_best(best).document)
    document = getattr(best, "document", best)
    if not isinstance(document, Mapping) or "knobs" not in document:
        raise ValueError(
            f"expected a best.yaml path, an autotune.load_best(...) result or its document "
            f"(a mapping with 'knobs'); got {type(best).__name__}."
        )
    return dict(document)


def accumulation(best: Mapping[str, Any]) -> int:
    """Gradient-accumulation steps the exported configuration trains with: best.yaml's
    ``grad_accum`` (global batch = micro-batch x steps x ranks: core/global_batch.py), else 1."""
    return int(best.get("grad_accum") or 1)


def keeps_own_accumulation(best: Mapping[str, Any], own: Any, field: str,
                           own_batch: Any = None) -> bool:
    """Whether the user's own accumulation (``own``, their framework's ``field``) is to be
    kept: best.yaml carries none (written before autotune carried it, when every trial ran
    unaccumulated), and theirs is more than 1. Warns once, naming the field and the global
    batch that results: the file's micro-batch times their accumulation, theirs only where the
    micro-batch is their own (``own_batch``, where the caller knows it); its figure was
    measured without their accumulation."""
    if "grad_accum" in best or int(own or 1) <= 1:
        return False
    from autotune.production.runtime import KnobOverridden

    steps, micro = int(own), int(best["knobs"]["batch_size"])
    if own_batch is not None and int(own_batch) == micro:
        effect = "so your global batch stays as it is"
    else:
        yours = (f" where yours was {int(own_batch)} x {steps} = {int(own_batch) * steps}"
                 if own_batch is not None else "")
        effect = (f"with the file's micro-batch {micro}: a global batch of {micro} x {steps} = "
                  f"{micro * steps} per rank{yours}, which the study did not measure")
    warnings.warn(
        f"autotune: this best.yaml carries no grad_accum (written before autotune read the "
        f"accumulation): your {field}={steps} is kept, {effect}; its figures were measured "
        f"without accumulation (micro-batch {micro} alone). Run the study again to measure it "
        "with yours.", KnobOverridden, stacklevel=3)
    return True


def environment(knobs: Mapping[str, Any]) -> dict[str, str]:
    """Environment variables that set, for a process started with them, what the adapters'
    ``apply`` / ``prepare_module`` set in a running one: glibc's allocator and the threads."""
    env = dict(RETAIN_ENV) if knobs.get("host_allocator") == "retain" else {}
    if knobs.get("cpu_threads"):
        env["OMP_NUM_THREADS"] = str(int(knobs["cpu_threads"]))
    if knobs.get("expandable_segments"):
        from autotune.core.host import ALLOC_CONF, EXPANDABLE

        env[ALLOC_CONF] = EXPANDABLE
    return env


#: Knobs no framework argument holds: the adapters set them in the user's process.
IN_PROCESS = {"host_allocator": "default", "cpu_threads": None, "cudnn_benchmark": False,
              "expandable_segments": False,
              "pad_to_multiple_of": None, "attention": "default", "padding_free": False}


def in_process(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The measured knobs that only the adapters' in-process call applies (not their
    framework's own arguments), where they differ from leaving things as they are."""
    return {k: knobs[k] for k, neutral in IN_PROCESS.items()
            if k in knobs and knobs[k] != neutral}


def load_object(path: str, args: Mapping[str, Any] | None, what: str) -> Any:
    """Resolve ``package.module.attr`` and call it with ``args``; a class or factory given with
    no args is called bare. Errors name the workload argument at fault and what it expects."""
    target = resolve_target(str(path))
    if not callable(target):
        raise WorkloadError(f"{what}={path!r} is a {type(target).__name__}, not a class or factory.")
    try:
        return target(**dict(args or {}))
    except TypeError as exc:
        raise WorkloadError(
            f"{what}={path!r} could not be called with {what}_args={dict(args or {})!r}: {exc}. "
            f"Give the arguments it takes as +workload.{what}_args={{name: value}}."
        ) from exc
