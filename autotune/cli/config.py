"""The schema (autotune/core/config.py) registered in Hydra's ConfigStore, and the resolvers
``autotune --help`` lists the workloads and knobs with. The YAML in ``conf/`` only picks
values; the schema, its defaults and its explanations live in core/config.py alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from autotune.core.config import (
    Config,
    KnobsConfig,
    LaunchConfig,
    MemoryConfig,
    StudyConfig,
    WindowConfig,
)
from autotune.core.knobs import KNOBS

__all__ = ["Config", "KnobsConfig", "LaunchConfig", "MemoryConfig", "StudyConfig",
           "WindowConfig", "register_configs"]


def _workloads_line() -> str:
    conf = Path(__file__).resolve().parent.parent / "conf" / "workload"
    names = sorted(p.stem for p in conf.glob("*.yaml"))
    return "one of " + ", ".join(names) + " (conf/workload/), or workload._target_=pkg.mod.Factory"


def _knobs_block() -> str:
    """One line per knob of the registry (what --help lists), wrapped at 100 columns."""
    import textwrap

    lines = []
    for k in KNOBS:
        lines += textwrap.wrap(k.doc, 100, initial_indent=f"  {k.name:20s} ",
                               subsequent_indent=" " * 23)
    return "\n".join(lines)


def _sized_words(key: str) -> str:
    """A device-sized key's two defaults (``study.n_trials`` -> "20; on the CPU 12"), so that
    --help states them from the schema rather than restating them."""
    section, name = key.split(".")
    field = next(f for f in dataclasses.fields(getattr(Config(), section)) if f.name == name)
    return str(field.metadata["sized"].words())


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="autotune_schema", node=Config)
    # `autotune --help` (conf/hydra/help/autotune.yaml) lists these from their sources.
    OmegaConf.register_new_resolver("autotune_workloads", _workloads_line, replace=True)
    OmegaConf.register_new_resolver("autotune_knobs", _knobs_block, replace=True)
    OmegaConf.register_new_resolver("autotune_sized", _sized_words, replace=True)
