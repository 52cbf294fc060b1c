"""What one study is: its resolved configuration (``StudySetup``, built once by the command
line and pickled to each worker process), the Optuna study it drives (``create_study``: TPE,
seeded per worker, the pruner), and the flag SIGINT/SIGTERM set (``StopFlag``)."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.core.config import LaunchConfig, StudyConfig, WindowConfig
from autotune.core.env import Env
from autotune.core.global_batch import accumulation
from autotune.core.space import Space
from autotune.core.tokens import TOKENS
from autotune.measure.protocol import WindowResult
from autotune.results.compile_cost import cache_env, effective_rate
from autotune.results.storage import is_sqlite
from autotune.search.pruning import BestFractionPruner
from autotune.search.round_spread import RoundSpread


@dataclass
class StudySetup:
    """Everything a worker needs, resolved once by the command line (cli/app.py): the
    configuration's ``study``, ``window`` and ``launch`` sections as the schema declares them
    (autotune/core/config.py, sized for the device), and what was resolved from them and the
    machine (the device, the search space, the memory limit, the storage URL)."""

    name: str
    storage: Any  # URL string or an optuna storage object
    out_dir: Path
    env: Env
    space: Space
    workload_spec: dict[str, Any]
    workload_label: str
    study: StudyConfig
    window: WindowConfig
    memory_limit_gb: float
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    seed: int = 0
    cpu_sized: bool = False  # the workload's own CPU-sized arguments (Workload.cpu_sized)
    #: time.monotonic() by which the study should end (run_study sets it from time_budget_s
    #: as it starts; CLOCK_MONOTONIC is one clock for every worker process of a node), and by
    #: which the confirmation's rounds should, to leave the numerics check its time.
    deadline: float | None = None
    confirm_end: float | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    worker_index: int = 0
    image_inputs: bool = False
    #: The framework whose Trainer a script study tuned ("hf"; workloads/script.py): its
    #: exports beside best.yaml.
    framework: str | None = None
    #: study.compare_to as found: (its name, its storage URL); None where unset or not there.
    compare: tuple[str, str] | None = None
    # Why study.compare_to / start_from named a study that is not there (yet): the first night
    # of a schedule, or a night after a missed one, runs without it and says so.
    nightly_missing: str | None = None
    start_knobs: dict[str, Any] | None = None  # study.start_from's best knobs, as found
    #: How much the confirmation's rounds will vary (search/round_spread.py): from an earlier
    #: confirmation on this device, or the device kind's measured figure; set as the run starts.
    round_spread: RoundSpread | None = None
    #: study.start_from's / compare_to's stored device and confirmation, for round_spread.
    earlier: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: The user's global batch per rank where the study accumulates (the workload's
    #: accumulation, or study.keep_global_batch: core/global_batch.py); None: it does not.
    global_batch: int | None = None

    @property
    def trial_env(self) -> dict[str, str]:
        """A trial's environment: the worker's, and the study's shared inductor cache."""
        return {**cache_env(self.out_dir), **self.worker_env}

    @property
    def ranks(self) -> LaunchConfig | None:
        """The launch section as each trial request carries it to the launcher (None: one
        process, as a study of 1 x 1 ranks runs)."""
        return self.launch if self.env.ranks > 1 else None

    def objective(self, result: WindowResult, knobs: dict[str, Any]) -> float:
        """The figure the study maximizes, in the window's unit (real tokens/s where the
        workload has tokens, else samples/s), over the whole run when run_steps is set."""
        per_step: float = int(knobs["batch_size"])
        if result.unit == TOKENS and result.steps:
            per_step = result.tokens / result.steps  # every rank's real tokens per step
        return effective_rate(result.rate, result.compile_s, per_step, self.study.run_steps)

    def with_study(self, **changes: Any) -> StudySetup:
        """This setup with its study section changed as the study runs it (a cut budget, the
        race off under several workers): a new setup, the configuration left as it was."""
        return dataclasses.replace(self, study=dataclasses.replace(self.study, **changes))

    def grad_accum(self, knobs: dict[str, Any]) -> int:
        """Micro-batches per optimizer step for these knobs: global_batch / batch_size where
        that divides, else 1 (core/global_batch.accumulation)."""
        return accumulation(self.global_batch, int(knobs["batch_size"]))


def launch_spec(launch: LaunchConfig, env: Env) -> dict[str, Any]:
    """The launch as the study records it (its ``launch`` attribute, which best.yaml's launch
    section is written from: results/launch_export.py): the section and this device's
    backend; {} for one process."""
    if env.ranks <= 1:
        return {}
    return {"nproc_per_node": launch.nproc_per_node, "nnodes": launch.nnodes,
            "rdzv_endpoint": launch.rdzv_endpoint, "rdzv_timeout_s": launch.rdzv_timeout_s,
            "collective_timeout_s": launch.collective_timeout_s,
            "backend": "nccl" if env.device == "cuda" else "gloo"}


class StopFlag:
    """SIGINT/SIGTERM set a flag the runner polls, so the running child is killed cleanly and
    its trial recorded as interrupted before the driver exits."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        # Handlers can only be set from the main thread: a study run from another thread
        # (autotune.tune in a worker thread) is stopped by its caller instead.
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.reason = signal.Signals(signum).name

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def sampler_seed(setup: StudySetup) -> int:
    """``seed`` on SQLite (one worker: a repeatable study). On a shared storage, independent
    ``autotune`` processes all have worker_index 0: with one seed they would draw the same
    configurations and wait on each other's twins, so each worker's host and pid are mixed in.
    Trials from several workers interleave by timing anyway, so nothing repeatable is lost."""
    url = setup.storage if isinstance(setup.storage, str) else ""
    if url and is_sqlite(url):
        return setup.seed + setup.worker_index
    me = f"{setup.seed}:{setup.worker_index}:{socket.gethostname()}:{os.getpid()}"
    return zlib.crc32(me.encode())


def create_study(setup: StudySetup, storage: Any = None,
                 sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """Create or load the study. ``storage``: an opened storage for ``setup.storage`` (the URL
    is still what decides the sampler's seed); None opens the URL."""
    if sampler is None:
        with warnings.catch_warnings():  # multivariate/group are "experimental" since Optuna 2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=sampler_seed(setup), multivariate=True, group=True,
                constant_liar=True, n_startup_trials=5,
            )
    study = optuna.create_study(
        storage=storage or setup.storage, study_name=setup.name, direction="maximize", sampler=sampler,
        pruner=BestFractionPruner() if setup.study.prune else optuna.pruners.NopPruner(),
        load_if_exists=True,
    )
    return study
