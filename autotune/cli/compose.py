"""From override strings to a validated ``Config``: the composition the command line and
``autotune.tune`` share, with Hydra's errors turned into one paragraph (``UsageError``).

Hydra composes the same way for both: conf/config.yaml, the workload group, then the overrides
in Hydra's syntax (``workload=mlp``, ``study.n_trials=4``, ``+workload.hidden=256``), checked
against the schemas in cli/config.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from autotune.cli.crash import UsageError

if TYPE_CHECKING:  # the schemas import the knob registry, and it torch: imported when composing
    from autotune.cli.config import Config

#: The Hydra configs ship inside the package (package data), so a wheel install finds them.
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def force_workload_args(args: Sequence[str]) -> list[str]:
    """``+workload.<arg>=`` becomes ``++workload.<arg>=`` (add or override). The README's form
    adds an argument for a user factory, but Hydra refuses ``+`` for a key the default workload
    (resnet18) already has, e.g. ``image_size``; which keys reach a user factory is decided by
    what was typed (app.build_setup), not by the default workload's node."""
    return ["+" + a if a.startswith("+workload.") else a for a in args]


def compose_config(overrides: Sequence[str]) -> Config:
    """The validated config for these overrides, or a UsageError naming what is wrong and what
    is valid. Works inside a running Hydra app too (its global state is put back)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException, MissingConfigException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf.errors import OmegaConfBaseException

    from autotune.cli.config import register_configs

    register_configs()
    outer = get_gh_backup() if GlobalHydra.instance().is_initialized() else None
    if outer is not None:
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose("config", overrides=force_workload_args(overrides))
            return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except MissingConfigException as exc:
        options = ", ".join(sorted(exc.options or [])) if getattr(exc, "options", None) else ""
        raise UsageError(f"{exc}".split("\n")[0] + (
            f" Valid workloads: {options}, or workload._target_=package.module.Factory for "
            "your own." if options else "")) from None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        text = " ".join(str(exc).split())
        raise UsageError(
            f"invalid configuration: {text}. Valid top-level keys: workload, device, seed, "
            "workers, tracking, study.*, window.*, memory.*, knobs.*, launch.* (see docs/reference: configuration keys).") from None
    finally:
        if outer is not None:
            restore_gh_from_backup(outer)
