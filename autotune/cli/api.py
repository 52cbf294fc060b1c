"""autotune from Python: the study the command line runs, as a function that returns its result.

    best = autotune.tune(["workload=mlp", "device=cpu", "study.n_trials=4"])
    best = autotune.tune(workload=MyWorkload(hidden=256), device="cpu", n_trials=8)
    best.knobs, best.metrics["samples_per_sec"], best.document["speedup_text"]
    best.metrics["unit"]  # "tokens/s" for a workload with tokens: best.metrics["tokens_per_sec"]

The overrides are the command line's own strings (Hydra's syntax), composed and checked the same
way; keywords are conveniences for the common ones, and ``workload`` may also be a config node
(a mapping with ``_target_``) or a Workload object (sent to the trial processes by value,
autotune/core/shipping.py). Everything the command line guarantees holds: each trial in a
process of its own (the calling process never starts CUDA), resume by running the same call
again, the exports and the report. Its exit codes are exceptions here: a usage error is a
``ConfigError`` (a ValueError), a study that exported nothing ``NothingExported``, a nightly
regression ``RegressionFound`` and a machine too busy to measure ``CouldNotMeasure`` (both carry
the exported ``best``), and Ctrl-C (a notebook's interrupt) stops the running trial, records
it, and raises ``StudyInterrupted``, a KeyboardInterrupt: call again to resume.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.cli.app import USER_ERRORS, cpu_defaults_words, prepare, print_header, publish_study
from autotune.cli.compose import compose_config
from autotune.cli.config import Config
from autotune.cli.crash import UsageError
from autotune.core.console import study_log
from autotune.core.shipping import ToShip, workload_parts
from autotune.core.workload import Workload
from autotune.production import verify as verify_module
from autotune.production.best import BestConfig, load_best
from autotune.production.verify import Verified
from autotune.production.verify import verify as verify_rounds
from autotune.results.compare import REGRESSION_EXIT
from autotune.search.loop.failfast import NOTHING_EXPORTED
from autotune.search.run import COULD_NOT_MEASURE, run_study

log = logging.getLogger("autotune")


class StudyError(RuntimeError):
    """A study that ended without the result it was run for. ``code`` is the command line's
    exit code for the same end; ``best`` the exported configuration, where there is one;
    ``tuned`` what an adapter's ``tune`` returns for it (hf.tune's HFTuned, lightning.tune's
    LightningTuned), so a busy machine's caller still gets objects to train with."""

    code = 1

    def __init__(self, message: str, best: BestConfig | None = None):
        super().__init__(message)
        self.best = best
        self.tuned: Any = None


class ConfigError(StudyError, ValueError):
    """A wrong override, workload, knob value or storage (exit code 2): nothing was run."""

    code = 2


class NothingExported(StudyError):
    """The study exported nothing: no trial finished within the memory limit, or the baseline
    (the user's own settings) crashed (exit code 1)."""


class RegressionFound(StudyError):
    """study.compare_to found a regression against the earlier study (exit code 3)."""

    code = REGRESSION_EXIT


class CouldNotMeasure(StudyError):
    """The machine was too busy or too noisy to rank configurations (exit code 4); ``best``
    keeps only what the intervals support."""

    code = COULD_NOT_MEASURE


class VerifyError(StudyError, verify_module.VerifyError):
    """``autotune verify`` could not measure a side of its rounds: the study's folder lacks its
    trial records, a ``--script`` never stepped autotune's ``Meter``, or one side's training
    exited with an error (the message names that side's log). Exit code 2 from the command
    line; ``best`` is None."""

    code = 2


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C / SIGTERM (a notebook's interrupt): the running trial was stopped and recorded;
    the same call resumes the study."""

    def __init__(self, code: int):
        super().__init__("the study was interrupted; run the same call again to resume")
        self.code = code


def tune(overrides: Sequence[str] = (), *,
         workload: str | Mapping[str, Any] | Workload | ToShip | None = None,
         device: str | None = None, name: str | None = None, storage: str | None = None,
         n_trials: int | None = None, knobs: Mapping[str, Any] | None = None,
         out_dir: str | Path | None = None) -> BestConfig:
    """Run a study and return its exported configuration (``best.yaml`` read back).

    ``overrides``: the command line's arguments (``["workload=mlp", "study.n_trials=4"]``).
    ``workload``: a shipped workload's name (``"resnet18"``), a config node (``{"_target_":
    "my_pkg.MyWorkload", "hidden": 256}``) or a Workload object. ``device``, ``name`` (the
    study's), ``storage`` (a URL), ``n_trials``, ``knobs`` (``{"amp": "bf16", "batch_size":
    [32, 64]}``: pin or narrow) and ``out_dir`` are the same settings as keywords."""
    cfg, markers = _config(list(overrides), workload, device, name, storage, n_trials, knobs,
                           out_dir)
    with _logging():
        try:
            setup, opened, workers, trials = prepare(cfg, markers)
        except USER_ERRORS as exc:
            raise ConfigError(" ".join(str(exc).split())) from None
        with study_log(setup.out_dir):
            print_header(setup, workers, cpu_defaults_words(cfg, setup.env.device))
            code = run_study(setup, opened, trials, workers)
            publish_study(cfg.tracking, setup, opened)  # tracking=[...]: as the command line does
    path = setup.out_dir / "best.yaml"
    best = load_best(path, check_environment=False) if path.exists() and code != NOTHING_EXPORTED else None
    return _result(code, best, setup.out_dir)


def verify(study: str | Path, *, rounds: int = 5, steps: int | None = None,
           warmup: int | None = None, script: Sequence[str] | None = None,
           nproc_per_node: int = 1) -> Verified:
    """Measure the realized speedup of the study's exported configuration in the production
    path, interleaved with the original settings (autotune/production/verify.py): ``study`` is a
    best.yaml, its folder, or a study name under studies/. ``script``: your training script
    and its arguments, run as they are (it must build ``autotune.Runtime`` and step its
    ``meter()``). Returns a ``Verified``: the rounds' figures, the realized speedup with its
    interval beside the study's, and what the production path adds where it falls short.
    Raises ``ConfigError`` when ``study`` names no study, and ``VerifyError`` when a side
    cannot be measured."""
    path = Path(study)
    if not path.exists() and (Path("studies") / str(study)).exists():
        path = Path("studies") / str(study)
    if not (path / "best.yaml").exists() and not (path.is_file() and path.suffix == ".yaml"):
        raise ConfigError(f"verify: {study!r} is not a best.yaml, a study folder holding one, or "
                          "a study name under studies/.")
    with _logging():
        try:
            return verify_rounds(path, rounds=rounds, steps=steps, warmup=warmup, script=script,
                                 nproc_per_node=nproc_per_node)
        except verify_module.VerifyError as exc:
            raise VerifyError(str(exc)) from None


def _result(code: int, best: BestConfig | None, out_dir: Path) -> BestConfig:
    """The exit code as the caller sees it: the result, or the exception for that end."""
    if code in (130, 143):
        raise StudyInterrupted(code)
    if code == COULD_NOT_MEASURE:
        said = ((best.document.get("contention") or {}).get("could_not_measure") if best else None)
        raise CouldNotMeasure(said or "the machine was too busy to measure", best)
    if code == REGRESSION_EXIT:
        raise RegressionFound(f"the study regressed against study.compare_to: see "
                              f"{out_dir / 'report.html'}", best)
    if code != 0 or best is None:
        raise NothingExported(f"the study exported nothing (exit code {code}): see the messages "
                              f"above and {out_dir}")
    return best


def _config(overrides: list[str], workload: Any, device: str | None, name: str | None,
            storage: str | None, n_trials: int | None, knobs: Mapping[str, Any] | None,
            out_dir: str | Path | None) -> tuple[Config, list[str]]:
    """The composed config, and the override strings build_setup reads to tell what the user
    set (the keywords count as set)."""
    strings = list(overrides)
    if isinstance(workload, str):
        strings.append(f"workload={workload}")
    if device is not None:
        strings.append(f"device={device}")
    if n_trials is not None:
        strings.append(f"study.n_trials={int(n_trials)}")
    try:
        cfg = compose_config(strings)
    except UsageError as exc:
        raise ConfigError(str(exc)) from None
    markers = list(strings)
    settings: dict[str, str | Path | None] = {"name": name, "storage": storage, "out_dir": out_dir}
    for key, setting in settings.items():
        if setting is not None:
            setattr(cfg.study, key, str(setting))
            markers.append(f"study.{key}=")
    for knob, value in (knobs or {}).items():
        if not hasattr(cfg.knobs, knob):
            valid = ", ".join(cfg.knobs.__dataclass_fields__)  # type: ignore[attr-defined]
            raise ConfigError(f"knobs={{{knob!r}: ...}}: no such knob. Valid knobs: {valid}.")
        setattr(cfg.knobs, knob, list(value) if isinstance(value, (list, tuple)) else value)
    if isinstance(workload, Workload):
        workload = workload_parts(workload)
    if isinstance(workload, ToShip):  # the user's live objects: sent to the trials by value
        workload = workload.spec(Path(cfg.study.out_dir) / ".shipped")
    if isinstance(workload, Mapping):
        if "_target_" not in workload:
            raise ConfigError(f"workload={dict(workload)!r}: a config node needs a _target_ "
                              "(package.module.Factory) and the factory's arguments.")
        cfg.workload = dict(workload)
        markers += [f"workload.{k}=" for k in workload]
    return cfg, markers


@contextlib.contextmanager
def _logging() -> Iterator[None]:
    """autotune's own log lines (each trial's result and diagnosis) on stderr while the study
    runs, where the caller has not set up logging for them; the caller's logging is left as
    it was."""
    if log.handlers or logging.getLogger().handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
