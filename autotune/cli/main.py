"""``autotune``: the Hydra app. Compose and validate the config once, run the study, export.

Usage errors (a wrong key or type, an unknown workload, a knob value invalid on this device, a
storage that does not answer) print one paragraph naming what is wrong and what is valid, and
exit with code 2. No study data is touched before the config is known to be good.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from autotune import __version__
from autotune.cli.compose import CONF_DIR, compose_config, force_workload_args
from autotune.cli.crash import UsageError, explain, fail
from autotune.core.quick_exit import quick_exit
from autotune.measure.launch import start_server_soon

# Nothing imported above imports torch: main() starts the fork server first (it imports torch,
# torchvision and the window's code), and the driver's own imports (the config schemas' knob
# registry, then the study's modules) run beside it. A one-trial study's header came 3 s sooner
# on 2 cores (9.2 -> 6.1 s, 2026-11-27, docs/benchmarks.md "The fork server starts before the
# driver imports torch").
if TYPE_CHECKING:
    from autotune.cli.config import Config

log = logging.getLogger("autotune")


def check_overrides(args: list[str]) -> None:
    """Compose the config the way Hydra will, to turn its errors into one clear paragraph."""
    if any(a.startswith("-") for a in args):
        return  # --help, --cfg, --multirun...: Hydra's own handling
    try:
        compose_config([a for a in args if not a.startswith("hydra.")])
    except UsageError as exc:
        fail(str(exc))


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


def verify_main(argv: list[str]) -> int:
    """``autotune verify <study> [--rounds N] [--steps N] [--warmup N] [-- python train.py
    ARGS...]``: the realized speedup in the production path (autotune/production/verify.py).
    A study of your command (``autotune -- python train.py ...``) verifies that command
    unless another is given; each side ends once its window is measured."""
    import argparse

    from autotune.cli.api import StudyError, verify

    ap = argparse.ArgumentParser(prog="autotune verify", description=verify_main.__doc__)
    ap.add_argument("study", help="best.yaml, its folder, a study name under studies/, or "
                                  "the study's other answer (best-same-training.yaml)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=None,
                    help="measured steps per side and round (default: twice the study's "
                         "window; without --script also at least 0.5 s of its exported "
                         "step, so that each side's load reading can be read)")
    ap.add_argument("--warmup", type=int, default=None, help="steps run before measuring")
    ap.add_argument("--nproc-per-node", type=int, default=1,
                    help="run --script as this many ranks under torchrun (before --script)")
    ap.add_argument("--script", nargs=argparse.REMAINDER, default=None,
                    help="your training script and its arguments, run as they are")
    command: list[str] | None = None
    if "--" in argv:  # autotune verify STUDY -- python train.py ARGS...
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
        if command and Path(command[0]).name.startswith("python"):
            command = command[1:]
    a = ap.parse_args(argv)
    try:
        result = verify(a.study, rounds=a.rounds, steps=a.steps, warmup=a.warmup,
                        script=command or a.script or None, nproc_per_node=a.nproc_per_node)
    except (StudyError, ValueError) as exc:
        fail(str(exc))
        return 2
    print(f"autotune verify: {result.text()}")
    return 0


def follow_main(argv: list[str]) -> int:
    """``autotune follow <study dir>``: on each node but the driver's, launch this node's ranks
    for the study's trials of several nodes (launch.nnodes; autotune/measure/nodes.py)."""
    import argparse

    from autotune.measure.nodes import follow

    ap = argparse.ArgumentParser(prog="autotune follow", description=follow_main.__doc__)
    ap.add_argument("study_dir", help="the study's directory (study.out_dir/study.name), on a "
                                      "filesystem every node mounts")
    a = ap.parse_args(argv)
    study_dir = Path(a.study_dir)
    # It may start before the driver's node made the study's directory (both started at once
    # by srun); a path this node does not share with the driver's is one nobody writes to, so
    # the follower says which path it watches.
    study_dir.mkdir(parents=True, exist_ok=True)
    return follow(study_dir)


def track_main(argv: list[str]) -> int:
    """``autotune track STUDY tracking=[mlflow,tensorboard,wandb]``: publish a stored study,
    finished or still running, to experiment trackers (autotune/results/tracking.py), as a
    study with ``tracking=...`` does at its end. Where each tracker writes is its own
    environment's: MLFLOW_TRACKING_URI, WANDB_MODE / WANDB_API_KEY, AUTOTUNE_TENSORBOARD_DIR.
    Exit code 1 when a tracker could not take it (said in one line), 2 on a usage error."""
    import argparse

    from autotune.core.config import StudyConfig, tracker_names
    from autotune.results.compare import CompareError, compare_studies
    from autotune.results.tracking import publish, stored_study

    ap = argparse.ArgumentParser(prog="autotune track", description=track_main.__doc__)
    ap.add_argument("study", help="the study's folder (holding study.db) or its name under "
                                  "studies/")
    ap.add_argument("tracking", help="tracking=[mlflow,tensorboard,wandb], or one name")
    ap.add_argument("--storage", help="its Optuna storage URL, when not the folder's study.db "
                                      "(default: $AUTOTUNE_STORAGE)")
    ap.add_argument("--name", help="the study's name in that storage (default: the folder's)")
    ap.add_argument("--compare-to", help="an earlier study: its nightly verdict as a tag")
    ap.add_argument("--compare-storage", help="its storage URL, when not this study's")
    ap.add_argument("--regression-pct", type=float, default=StudyConfig().regression_pct)
    a = ap.parse_args(argv)
    try:
        names = tracker_names(_tracking_value(a.tracking))
        study, folder, url = stored_study(a.study, a.storage, a.name)
        comparison = None
        if a.compare_to:
            other = a.compare_storage or a.storage or (
                f"sqlite:///{folder.parent / a.compare_to / 'study.db'}")
            comparison = compare_studies(study, a.compare_to, other, a.regression_pct)
    except (ValueError, CompareError) as exc:
        fail(str(exc))
        return 2
    done = publish(study, folder, url, names, comparison)  # one line per tracker, logged
    return 1 if any(w.startswith("not published") for w in done.values()) else 0


def apply_main(argv: list[str]) -> int:
    """``autotune apply STUDY -- python train.py ARGS``: your command, as you launch it, with the
    study's best.yaml applied: a script with ``autotune.Runtime`` lines reads it (AUTOTUNE_BEST),
    and a Hugging Face Trainer the script builds takes its TrainingArguments fields
    (adapters/hf/script.py), with no changed line. The command's exit code is returned."""
    import argparse

    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="autotune apply", description=apply_main.__doc__,
                                 usage="autotune apply STUDY -- python train.py ARGS...")
    ap.add_argument("study", help="the study's folder (studies/NAME), its best.yaml, or its "
                                  "name under studies/")
    ap.parse_args(argv[:cut])  # --help: the usage, exit 0
    if cut != 1 or len(argv) <= cut + 1:
        fail("usage: autotune apply STUDY -- python train.py ARGS... (STUDY: the study's "
             "folder, its best.yaml, or its name under studies/)")
        return 2
    from autotune.core.workload import WorkloadError
    from autotune.workloads.script import check_command

    study, command = Path(argv[0]), argv[2:]
    best = study if study.suffix == ".yaml" else (
        study / "best.yaml" if study.is_dir() else Path("studies") / study / "best.yaml")
    if not best.is_file():
        fail(f"autotune apply: no best.yaml at {best}: give the study's folder (studies/NAME), "
             "its best.yaml, or its name under studies/")
        return 2
    try:
        command = check_command(command)
    except WorkloadError as exc:
        fail(str(exc))
        return 2
    env = {**os.environ, "AUTOTUNE_BEST": str(best.resolve())}
    return subprocess.call([sys.executable, "-m", "autotune.measure.script_run", *command],
                           env=env)


def _tracking_value(text: str) -> str | list[str]:
    """``tracking=[mlflow,wandb]`` (the study's own override) or ``mlflow`` as names."""
    value = text.removeprefix("tracking=").strip()
    if value.startswith("[") and value.endswith("]"):
        return [n.strip().strip("'\"") for n in value[1:-1].split(",") if n.strip()]
    return value


#: Every command besides a study (``autotune key=value ...``): its name, its entry, and its
#: usage and purpose as ``autotune --help`` lists them (``subcommands_block``). ``main``
#: dispatches through this table only, so a subcommand cannot exist without its --help line
#: (``verify`` and ``follow`` had none until 2026-12-01: tests/test_help.py).
SUBCOMMANDS: dict[str, tuple[Callable[[list[str]], int], str, str]] = {
    "verify": (verify_main, "STUDY [--rounds N] [-- python train.py ARGS...]",
               "the speedup realized in your training: the study's best.yaml against your "
               "own settings, in rounds (--script: your own script, run as it is)"),
    "track": (track_main, "STUDY tracking=[mlflow,tensorboard,wandb]",
              "publish a stored study, finished or running, to experiment trackers: a parent "
              "run for the study, one per trial, best.yaml and the report as artifacts"),
    "apply": (apply_main, "STUDY -- python train.py ARGS...",
              "your command as you launch it with the study's best.yaml applied (a Hugging "
              "Face Trainer's arguments set with no changed line)"),
    "follow": (follow_main, "STUDY_DIR",
               "on each node but the driver's, run this node's ranks of a study over "
               "several nodes (launch.nnodes)"),
}


def subcommands_block() -> str:
    """``autotune --help``'s lines for SUBCOMMANDS, each with its ``--help``."""
    lines = []
    for name, (_, usage, what) in SUBCOMMANDS.items():
        lines += [f"  autotune {name} {usage}",
                  *textwrap.wrap(f"{what}. More: autotune {name} --help", 94,
                                 initial_indent=" " * 6, subsequent_indent=" " * 6)]
    return "\n".join(lines)


def script_overrides(argv: list[str]) -> list[str]:
    """``autotune [overrides] -- python train.py ARGS...``: the overrides, and the command as
    the script workload's (workloads/script.py), its name the script's and its working
    directory this one; without ``--``, ``argv`` as it is."""
    if "--" not in argv:
        return argv
    cut = argv.index("--")
    command = argv[cut + 1:]
    if not command:
        fail("`autotune ... --` needs the command you train with after it: "
             "`autotune [overrides] -- python train.py ARGS...`")
    from autotune.core.workload import WorkloadError
    from autotune.workloads.script import check_command, script_of

    try:
        command = check_command(command)
    except WorkloadError as exc:
        fail(str(exc))
    name = Path(script_of(command)).stem.replace(".", "-")
    return [*argv[:cut], "workload._target_=autotune.workloads.script.ScriptWorkload",
            f"++workload.command=[{','.join(_quoted(a) for a in command)}]",
            f"++workload.cwd={_quoted(os.getcwd())}", f"++workload.name={_quoted(name)}"]


def verbose_flag(argv: list[str]) -> list[str]:
    """``autotune -v ...``: every detail on the console too (core/console.py), as
    AUTOTUNE_VERBOSE=1 does; the flag is taken out before Hydra reads the overrides. After
    ``--`` the arguments are the user's command's own."""
    cut = argv.index("--") if "--" in argv else len(argv)
    if not {"-v", "--verbose"} & set(argv[:cut]):
        return argv
    os.environ["AUTOTUNE_VERBOSE"] = "1"
    return [a for a in argv[:cut] if a not in ("-v", "--verbose")] + argv[cut:]


def _quoted(text: str) -> str:
    """A string as one quoted Hydra override value: quotes escaped, no interpolation."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${") + "'"


def main() -> None:
    if sys.argv[1:2] in (["--version"], ["-V"]):
        print(f"autotune {__version__}")
        return
    if sys.argv[1:2] and sys.argv[1] in SUBCOMMANDS:
        logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
        sys.exit(SUBCOMMANDS[sys.argv[1]][0](sys.argv[2:]))
    # A user workload is imported by its dotted path from where the command is typed, as a
    # `python -m` run would; a console script alone would only see installed packages.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    sys.argv[1:] = force_workload_args(script_overrides(verbose_flag(sys.argv[1:])))
    if not any(a.startswith("-") for a in sys.argv[1:]):  # a study, not --help or --cfg
        start_server_soon()  # after sys.path has the working directory: trials inherit it
    check_overrides(sys.argv[1:])
    from autotune.cli.config import register_configs

    register_configs()
    OmegaConf.register_new_resolver("autotune_subcommands", subcommands_block, replace=True)
    try:
        _app()
    except SystemExit as exc:
        quick_exit(exc.code)
    quick_exit(0)

