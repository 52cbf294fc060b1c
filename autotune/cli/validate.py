"""Every check a key's type cannot make: a value out of its range, keys that contradict each
other, a key the machine or the workload cannot honour. Hydra has already checked each key's
name and type against the schema (core/config.py); what is left is here, in one place, each a
paragraph naming what is wrong and what is valid, raised as a UsageError (exit code 2) before
any trial runs or any study data is touched."""

from __future__ import annotations

from typing import Any

from autotune.cli.crash import UsageError
from autotune.core.config import Config, LaunchConfig
from autotune.core.distributed import endpoint_taken
from autotune.core.env import Env
from autotune.core.workload import Workload
from autotune.results.storage import is_sqlite, redact
from autotune.results.trials import ANSWERS
from autotune.search.checks.numerics import check_tolerance


def validate(cfg: Config, workload: Workload, probed: Env, url: str) -> None:
    """Raise a UsageError for the first thing wrong with ``cfg`` on this machine (``probed``,
    before the ranks' share of it), for this workload and this storage URL."""
    workers = resolve_workers(cfg.workers, probed)
    _check_study(cfg)
    _check_memory(cfg)
    nproc, nnodes = cfg.launch.nproc_per_node, cfg.launch.nnodes
    if nproc * nnodes > 1 and workload.not_launchable:
        raise UsageError(f"launch.nproc_per_node={nproc}: {workload.name} "
                         f"workloads cannot run as ranks yet: {workload.not_launchable}. Tune "
                         "it as one process (launch.nproc_per_node=1), or as a plain PyTorch "
                         "workload (workload._target_=your Workload) under ranks.")
    check_launch(cfg.launch, probed, workers)
    if workers > 1 and is_sqlite(url):
        raise UsageError(
            f"workers={workers} with SQLite storage ({redact(url)}) is refused: SQLite is for one "
            "worker. Point study.storage (or AUTOTUNE_STORAGE) at PostgreSQL, e.g. "
            "postgresql://user:password@host/db, or use journal:PATH for several workers on one "
            "machine."
        )


def resolve_workers(value: Any, env: Env) -> int:
    """``workers``: a positive count, or "auto" (one per visible GPU on CUDA, else one)."""
    if value == "auto":
        return max(1, env.gpu_count) if env.device == "cuda" else 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"workers={value!r} is not valid: use a positive integer or 'auto'.") from None
    if n < 1:
        raise UsageError(f"workers={n} is not valid: use a positive integer or 'auto'.")
    return n


def _check_study(cfg: Config) -> None:
    s = cfg.study
    if s.run_steps is not None and s.run_steps < 1:
        raise UsageError(f"study.run_steps={s.run_steps} must be a positive number of "
                         "training steps (the length of your run), or null to optimize the "
                         "steady-state throughput.")
    if s.training not in ANSWERS:
        raise UsageError(f"study.training={s.training!r} is not valid: use 'any' "
                         "(best.yaml holds the fastest configuration, whatever it changes in "
                         "training) or 'same' (the fastest that trains the same model as yours).")
    if s.time_budget_s is not None and s.time_budget_s <= 0:
        raise UsageError(f"study.time_budget_s={s.time_budget_s} must be a positive "
                         "number of seconds (the whole study's wall time), or null for none.")
    if not 0 < s.indifference < 1:
        raise UsageError(f"study.indifference={s.indifference} must be a fraction between 0 and "
                         "1: the difference in speed not worth a choice (0.05: 5%).")
    if not 0.5 < s.correct_selection < 1:
        # Kim and Nelson's procedure needs 1 - alpha > 1/k: at k = 2, the fewest finalists a
        # confirmation compares, 0.5 leaves its triangle no continuation region (h² = 0).
        raise UsageError(f"study.correct_selection={s.correct_selection} is not valid: it is "
                         "the probability that the confirmation keeps the fastest finalist, "
                         "and must lie above 0.5 and below 1 (0.95: 95%). At 0.5 or less, "
                         "with two finalists, Kim and Nelson's procedure has no rounds to "
                         "wait for (1 - alpha must exceed 1/k for k finalists): it would "
                         "choose on the toss of the first rounds' means.")
    if s.confirm_precision is not None and s.confirm_precision <= 0:
        raise UsageError(f"study.confirm_precision={s.confirm_precision} must be a positive "
                         "fraction (0.05: +-5%), or null to stop the rounds once the choice is "
                         "decided.")
    counts = {"n_trials": (s.n_trials, 0), "confirm_runs": (s.confirm_runs, 0),
              "confirm_top": (s.confirm_top, 1), "numerics_steps": (s.numerics_steps, 0),
              "remeasure_contended": (s.remeasure_contended, 0),
              "confirm_budget_s": (s.confirm_budget_s, 0)}
    for key, (value, least) in counts.items():
        if value is not None and value < least:
            raise UsageError(f"study.{key}={value} must be at least {least} (see `autotune "
                             f"--help` or the configuration reference for what it counts).")
    try:
        check_tolerance(dict(s.numerics_tolerance))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_memory(cfg: Config) -> None:
    if cfg.memory.limit_gb is not None and cfg.memory.limit_gb <= 0:
        raise UsageError(f"memory.limit_gb={cfg.memory.limit_gb} must be positive.")
    if not 0 < cfg.memory.limit_fraction <= 1:
        raise UsageError(f"memory.limit_fraction={cfg.memory.limit_fraction} must be in (0, 1].")


def check_launch(launch: LaunchConfig, env: Env, workers: int = 1) -> None:
    """The launch section against itself, the worker count and the device: how many ranks and
    nodes, where they meet, whether each rank has its GPU."""
    nproc, nnodes = launch.nproc_per_node, launch.nnodes
    if nproc < 1 or nnodes < 1:
        raise UsageError(f"launch.nproc_per_node={nproc}, launch.nnodes={nnodes}: both must be "
                         "positive (1 and 1: one process, the default).")
    if launch.scaling and nproc * nnodes == 1:
        raise UsageError("launch.scaling=true measures how several ranks scale over one: set "
                         "launch.nproc_per_node=N (N > 1), or leave launch.scaling unset.")
    if nnodes > 1 and not launch.rdzv_endpoint:
        raise UsageError(
            f"launch.nnodes={nnodes} needs launch.rdzv_endpoint=<this node's host>:<port>: the "
            "driver's node hosts each trial's rendezvous there, and every other node runs "
            "`autotune follow <study dir>` to join it (docs/cluster.md).")
    if nnodes > 1 and workers > 1:
        raise UsageError(
            f"launch.nnodes={nnodes} with workers={workers}: a trial of several nodes holds "
            "every node, so its trials run one at a time: leave workers at 1.")
    taken = launch.rdzv_endpoint and endpoint_taken(str(launch.rdzv_endpoint))
    if taken:
        raise UsageError(f"launch.rdzv_endpoint={launch.rdzv_endpoint}: {taken}: another process "
                         "holds it. Leave it unset (each trial's ranks then meet on a free port) "
                         "or name a free port.")
    if env.device == "cuda" and nproc > max(1, env.gpu_count):
        raise UsageError(f"launch.nproc_per_node={nproc} on CUDA needs a GPU per rank; "
                         f"{env.gpu_count} visible here.")
