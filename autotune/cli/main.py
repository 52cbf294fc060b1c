"""``autotune``: the Hydra app. Compose and validate the config once, run the study, export.

Usage errors (a wrong key or type, an unknown workload, a knob value invalid on this device, a
storage that does not answer) print one paragraph naming what is wrong and what is valid, and
exit with code 2. No study data is touched before the config is known to be good.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from autotune import __version__
from autotune.cli.config import Config, register_configs
from autotune.cli.crash import explain, fail

#: The Hydra configs ship inside the package (package data), so a wheel install finds them.
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
log = logging.getLogger("autotune")

def force_workload_args(args: list[str]) -> list[str]:
    """``+workload.<arg>=`` becomes ``++workload.<arg>=`` (add or override). The README's form
    adds an argument for a user factory, but Hydra refuses ``+`` for a key the default workload
    (resnet18) already has, e.g. ``image_size``; which keys reach a user factory is decided by
    what was typed (app.build_setup), not by the default workload's node."""
    return ["+" + a if a.startswith("+workload.") else a for a in args]


def check_overrides(args: list[str]) -> None:
    """Compose the config the way Hydra will, to turn its errors into one clear paragraph."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [a for a in args if not a.startswith("-") and not a.startswith("hydra.")]
    if any(a.startswith("-") for a in args):
        return  # --help, --cfg, --multirun...: Hydra's own handling
    register_configs()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose("config", overrides=overrides)
            OmegaConf.to_object(cfg)
    except MissingConfigException as exc:
        options = ", ".join(sorted(exc.options or [])) if getattr(exc, "options", None) else ""
        fail(f"{exc}".split("\n")[0] + (f" Valid workloads: {options}, or "
             "workload._target_=package.module.Factory for your own." if options else ""))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        text = " ".join(str(exc).split())
        fail(f"invalid configuration: {text}. Valid top-level keys: workload, device, seed, "
             "workers, study.*, window.*, memory.*, knobs.* (see README 'Configuration').")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _app(cfg: DictConfig) -> None:
    from autotune.cli.app import run

    config: Config = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    try:
        task_overrides = list(HydraConfig.get().overrides.task)
    except ValueError:
        task_overrides = []
    try:
        code = run(config, task_overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra would print the overrides, password included
        out = Path(config.study.out_dir) / config.study.name if config.study.name else None
        code = explain(exc, out, config.study.storage or os.environ.get("AUTOTUNE_STORAGE"))
    if code:
        sys.exit(code)


def main() -> None:
    if sys.argv[1:2] in (["--version"], ["-V"]):
        print(f"autotune {__version__}")
        return
    # A user workload is imported by its dotted path from where the command is typed, as a
    # `python -m` run would; a console script alone would only see installed packages.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    sys.argv[1:] = force_workload_args(sys.argv[1:])
    check_overrides(sys.argv[1:])
    register_configs()
    _app()
