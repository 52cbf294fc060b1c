"""From a validated Config to a finished study: resolve the device, workload, space and storage,
run the worker(s), export. Every user error surfaces here as one paragraph and exit code 2."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import Any

from autotune.cli.config import Config
from autotune.cli.crash import UsageError, explain, fail
from autotune.core.distributed import endpoint_taken
from autotune.core.env import DeviceError, Env, probe
from autotune.core.knobs import KnobError, build_space, keep_global_batch, without_accumulation
from autotune.core.workload import WorkloadError, build_workload, workload_name
from autotune.measure.launch import probe_env, start_server_soon
from autotune.measure.protocol import NODES_STOP_FILE, spans_nodes
from autotune.results.compare import CompareError, load_other, start_knobs
from autotune.results.record import study_attrs
from autotune.results.storage import (
    ENV_VAR,
    StorageError,
    is_sqlite,
    open_storage,
    redact,
    resolve_url,
)
from autotune.results.trials import ANSWER_FILES, ANSWERS
from autotune.search.checks.numerics import check_tolerance
from autotune.search.loop.conditions import ChangedConditions, check_resumable
from autotune.search.run import run_study
from autotune.search.setup import StudySetup

log = logging.getLogger("autotune")

# CPU-sized defaults, applied to keys the user did not set, so a CPU run takes minutes.
CPU_WINDOW = {"warmup_steps": 3, "measure_steps": 16, "measure_seconds": 5.0,
              "min_measure_steps": 4, "profile_steps": 2}
CPU_TRIALS = 12


def _overridden(overrides: list[str], prefix: str) -> set[str]:
    keys = set()
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith(prefix):
            keys.add(key[len(prefix):])
    return keys


def resolve_workers(value: Any, env: Env) -> int:
    if value == "auto":
        return max(1, env.gpu_count) if env.device == "cuda" else 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"workers={value!r} is not valid: use a positive integer or 'auto'.") from None
    if n < 1:
        raise UsageError(f"workers={n} is not valid: use a positive integer or 'auto'.")
    return n


def _probe(requested: str) -> Env:
    """The device, probed in a child of the trials' fork server (torch already imported
    there); where that child cannot run or dies, in a fresh interpreter, which reports why."""
    try:
        return Env.from_dict(probe_env(requested))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the fresh interpreter's probe says what is wrong
        log.debug("probing in the fork server failed (%s): probing in a fresh interpreter", exc)
        return probe(requested)


def build_setup(cfg: Config, overrides: list[str]) -> tuple[StudySetup, int, int]:
    """The study's setup, its worker count and its trial count (CPU-sized when unset)."""
    spec = dict(cfg.workload)
    user_keys = _overridden(overrides, "workload.")
    if "_target_" in user_keys:
        # A user workload: the default group's arguments (resnet18's image_size, ...) belong to
        # another factory, so only the keys given on the command line are passed.
        spec = {k: v for k, v in spec.items() if k in user_keys}
    workload = build_workload(spec)
    if cfg.launch.nproc_per_node * cfg.launch.nnodes > 1 and workload.not_launchable:
        raise UsageError(f"launch.nproc_per_node={cfg.launch.nproc_per_node}: {workload.name} "
                         f"workloads cannot run as ranks yet: {workload.not_launchable}. Tune "
                         "it as one process (launch.nproc_per_node=1), or as a plain PyTorch "
                         "workload (workload._target_=your Workload) under ranks.")
    probed = _probe(cfg.device)
    workers = resolve_workers(cfg.workers, probed)
    env = ranked(probed, cfg.launch, workers)
    user_sizes = user_keys - {"_target_"}
    cpu_sized = False
    if env.device == "cpu" and not user_sizes:
        small = workload.cpu_sized()
        if small is not workload:
            cpu_sized, workload = True, small
    window = dataclasses.asdict(cfg.window)
    if env.device == "cpu":
        for key, value in CPU_WINDOW.items():
            if key not in _overridden(overrides, "window."):
                window[key] = value
    n_trials = cfg.study.n_trials
    if env.device == "cpu" and "n_trials" not in _overridden(overrides, "study."):
        n_trials = CPU_TRIALS
    knob_overrides = {k: v for k, v in dataclasses.asdict(cfg.knobs).items() if v is not None}
    space = build_space(env, workload, knob_overrides)
    global_batch = None
    if cfg.study.keep_global_batch:
        global_batch = int(workload.defaults.get("batch_size", space.baseline["batch_size"]))
        space = keep_global_batch(space, global_batch)
    else:
        space = without_accumulation(space)

    label = workload_name(spec)
    # A run as ranks is measured under other conditions than one process (search/loop/conditions.py):
    # by default it gets a study of its own rather than a refusal to resume the other.
    name = cfg.study.name or f"{label}-{env.device}" + (f"-{env.ranks}ranks" if env.ranks > 1 else "")
    out_dir = Path(cfg.study.out_dir) / name
    url = resolve_url(cfg.study.storage, out_dir / "study.db")
    if workers > 1 and is_sqlite(url):
        raise UsageError(
            f"workers={workers} with SQLite storage ({redact(url)}) is refused: SQLite is for one "
            "worker. Point study.storage (or AUTOTUNE_STORAGE) at PostgreSQL, e.g. "
            "postgresql://user:password@host/db, or use journal:PATH for several workers on one "
            "machine."
        )
    if cfg.study.run_steps is not None and cfg.study.run_steps < 1:
        raise UsageError(f"study.run_steps={cfg.study.run_steps} must be a positive number of "
                         "training steps (the length of your run), or null to optimize the "
                         "steady-state throughput.")
    if cfg.memory.limit_gb is not None and cfg.memory.limit_gb <= 0:
        raise UsageError(f"memory.limit_gb={cfg.memory.limit_gb} must be positive.")
    if not 0 < cfg.memory.limit_fraction <= 1:
        raise UsageError(f"memory.limit_fraction={cfg.memory.limit_fraction} must be in (0, 1].")
    if cfg.study.training not in ANSWERS:
        raise UsageError(f"study.training={cfg.study.training!r} is not valid: use 'any' "
                         "(best.yaml holds the fastest configuration, whatever it changes in "
                         "training) or 'same' (the fastest that trains the same model as yours).")
    if cfg.study.time_budget_s is not None and cfg.study.time_budget_s <= 0:
        raise UsageError(f"study.time_budget_s={cfg.study.time_budget_s} must be a positive "
                         "number of seconds (the whole study's wall time), or null for none.")
    limit = cfg.memory.limit_gb or cfg.memory.limit_fraction * env.total_memory_gb
    setup = StudySetup(
        name=name, storage=url, out_dir=out_dir, env=env, space=space, workload_spec=spec,
        workload_label=workload.describe(), window=window, memory_limit_gb=limit, seed=cfg.seed,
        cpu_sized=cpu_sized, agent=cfg.study.agent, prune=cfg.study.prune,
        timeout_s=cfg.study.timeout_s, time_budget_s=cfg.study.time_budget_s,
        image_inputs=workload.image_inputs,
        confirm_runs=max(0, cfg.study.confirm_runs), confirm_top=max(1, cfg.study.confirm_top),
        run_steps=cfg.study.run_steps,
        remeasure_contended=max(0, cfg.study.remeasure_contended),
        confirm_precision=cfg.study.confirm_precision,
        confirm_budget_s=max(0.0, cfg.study.confirm_budget_s), race=bool(cfg.study.race),
        global_batch=global_batch, numerics_steps=max(0, cfg.study.numerics_steps),
        numerics_tolerance=_tolerance(cfg), launch=launch_spec(cfg.launch, env),
        scaling=bool(cfg.launch.scaling), training=cfg.study.training,
    )
    _nightly(setup, cfg)
    return setup, workers, n_trials


def ranked(env: Env, launch: Any, workers: int = 1) -> Env:
    """The env each trial's process sees: with N ranks per node, one rank's share of the cores
    (the loader and thread knobs are searched within it, as each rank of the run gets them)
    and torchrun's one OpenMP thread per rank as the baseline's threads; with several workers
    in this invocation (one node), each worker's trials get their own share too (search/run.py
    pins them), so concurrent trials do not measure each other."""
    nproc, nnodes = int(launch.nproc_per_node), int(launch.nnodes)
    if nproc < 1 or nnodes < 1:
        raise UsageError(f"launch.nproc_per_node={nproc}, launch.nnodes={nnodes}: both must be "
                         "positive (1 and 1: one process, the default).")
    if getattr(launch, "scaling", False) and nproc * nnodes == 1:
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
    share = max(1, env.cpu_count // (nproc * max(1, workers)))
    if nproc * nnodes == 1:
        return env if workers <= 1 else dataclasses.replace(env, cpu_count=share)
    return dataclasses.replace(env, cpu_count=share, torch_threads=1, ranks=nproc * nnodes,
                               nodes=nnodes)


def launch_spec(launch: Any, env: Env) -> dict[str, Any]:
    """What each trial request carries to the launcher ({}: one process)."""
    if env.ranks <= 1:
        return {}
    return {"nproc_per_node": int(launch.nproc_per_node), "nnodes": int(launch.nnodes),
            "rdzv_endpoint": launch.rdzv_endpoint, "rdzv_timeout_s": int(launch.rdzv_timeout_s),
            "collective_timeout_s": int(launch.collective_timeout_s),
            "backend": "nccl" if env.device == "cuda" else "gloo"}


def _tolerance(cfg: Config) -> dict[str, float]:
    try:
        check_tolerance(dict(cfg.study.numerics_tolerance))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return dict(cfg.study.numerics_tolerance)


def _nightly(setup: StudySetup, cfg: Config) -> None:
    """study.compare_to / study.start_from: where the earlier study lives; its best knobs, and
    its device and confirmation (how much this night's rounds will vary: search/round_spread.py).
    A storage that does not answer is a usage error (exit 2, before any trial); a study that is
    not in it is a warning and this study runs without it, because a nightly schedule's first
    night, or the night after a missed one, names a study that never ran: failing then would
    lose the night's study too."""
    s = cfg.study
    setup.regression_pct = s.regression_pct
    for name in dict.fromkeys(filter(None, (s.compare_to, s.start_from))):
        url = (s.compare_storage or s.storage or os.environ.get(ENV_VAR)
               or f"sqlite:///{Path(s.out_dir) / name / 'study.db'}")
        try:
            other = load_other(name, url)
        except CompareError as exc:
            roles = " and ".join(r for r, v in (("study.compare_to", s.compare_to),
                                                 ("study.start_from", s.start_from)) if v == name)
            why = (f"{roles}: {exc} This study runs without it (nothing to compare with, or "
                   "to start from).")
            print(f"autotune: warning: {why}", file=sys.stderr)
            setup.nightly_missing = " ".join(filter(None, (setup.nightly_missing, why)))
            continue
        attrs = study_attrs(other)
        setup.earlier.append((f"study '{name}'", {"device": attrs.get("device"),
                                                  "confirmation": attrs.get("confirmation")}))
        if name == s.compare_to:
            setup.compare_to, setup.compare_storage = name, url
        if name == s.start_from:
            setup.start_knobs = start_knobs(name, url)


#: What a user can get wrong before any trial runs: each is one paragraph and exit code 2.
USER_ERRORS = (WorkloadError, KnobError, DeviceError, StorageError, UsageError, CompareError,
               ChangedConditions)


def prepare(cfg: Config, overrides: list[str]) -> tuple[StudySetup, Any, int, int]:
    """The study's setup, its opened storage, workers and trials; a user error raises one of
    USER_ERRORS before anything is written. The header is printed."""
    setup, workers, n_trials = build_setup(cfg, overrides)
    storage = open_storage(setup.storage)
    check_resumable(storage, setup, redact(str(setup.storage)))
    _print_header(setup, workers, cpu_defaults_words(setup.env.device, overrides, n_trials))
    return setup, storage, workers, n_trials


def cpu_defaults_words(device: str, overrides: list[str], n_trials: int) -> str | None:
    """Which of the CPU-sized defaults this run took, by name: a run given study.n_trials=1
    was told "1 trials unless window.* / study.n_trials are set" (2026-11-28)."""
    if device != "cpu":
        return None
    parts = []
    window = sorted(set(CPU_WINDOW) - _overridden(overrides, "window."))
    if window == sorted(CPU_WINDOW):
        parts.append("a CPU-sized window (window.* not set)")
    elif window:
        parts.append("CPU-sized " + ", ".join(f"window.{k}={CPU_WINDOW[k]}" for k in window)
                     + " (not set)")
    if "n_trials" not in _overridden(overrides, "study."):
        parts.append(f"{n_trials} trials (study.n_trials not set)")
    return "CPU run: " + " and ".join(parts) if parts else None


def run(cfg: Config, overrides: list[str]) -> int:
    start_server_soon()  # its imports overlap this process's setup (measure/launch.py)
    try:
        setup, storage, workers, n_trials = prepare(cfg, overrides)
    except USER_ERRORS as exc:
        fail(str(exc))
        return 2
    try:
        return run_study(setup, storage, n_trials, workers)
    except Exception as exc:  # noqa: BLE001 - an unattended run ends with one paragraph
        return explain(exc, setup.out_dir, str(setup.storage))
    finally:
        if spans_nodes(setup.launch):  # the other nodes' followers exit (measure/nodes.py)
            (setup.out_dir / NODES_STOP_FILE).write_text(f"study {setup.name} ended\n")


def objective_words(run_steps: int | None) -> str:
    """What the study maximizes, in words: the unit is the first trial's (tokens/s where the
    workload's batches carry tokens, core/tokens.py), so the header names both."""
    over = (f", over a run of {run_steps:,} steps with compile time included (study.run_steps)"
            if run_steps else "")
    return ("throughput in real tokens/s (padding excluded) where the workload's batches carry "
            f"tokens (Workload.tokens), else samples/s{over}")


def training_words(setting: str) -> str:
    """The header's statement of study.training: which answer best.yaml will hold."""
    if setting == "same":
        return ("answers: best.yaml holds the fastest configuration that trains the same model "
                "as yours (study.training=same; the knob reference classes each knob); the "
                f"fastest of all is confirmed beside it ({ANSWER_FILES['any']})")
    return ("answers: best.yaml holds the fastest configuration, whatever it changes in "
            "training (study.training=any, the default); the fastest that trains the same "
            f"model as yours is confirmed beside it ({ANSWER_FILES['same']})")


def fixed_lines(fixed: dict[str, tuple[Any, str]]) -> list[str]:
    """The knobs the study does not search, one line per reason: a one-process CPU study
    listed seven DDP knobs on seven lines with the same reason (2026-11-28)."""
    by_why: dict[str, list[str]] = {}
    for name, (value, why) in fixed.items():
        by_why.setdefault(why, []).append(f"{name}={value}")
    return [f"fixed {', '.join(knobs)}: {why}" for why, knobs in by_why.items()]


def _print_header(s: StudySetup, workers: int, cpu_defaults: str | None) -> None:
    e = s.env
    mem = f"{e.total_memory_gb:.1f} GB"
    print(f"autotune: study '{s.name}' on {e.device} ({e.device_name}, {mem}, torch {e.torch_version})")
    print(f"  workload: {s.workload_label}")
    if s.cpu_sized:
        print("  CPU run with no sizes set: using the workload's CPU-sized defaults "
              "(set any workload.* key to choose sizes yourself)")
    if cpu_defaults:
        print(f"  {cpu_defaults}")
    w = s.window
    print(f"  window: {w['warmup_steps']} warm-up steps, {w['measure_steps']} measured steps (at "
          f"least {w['min_measure_seconds']}s, at most {w['measure_seconds']}s); timeout "
          f"{w['timeout_s']}s per trial")
    print(f"  memory limit: {s.memory_limit_gb:.2f} GB; storage: {redact(str(s.storage))}; workers: {workers}")
    print(f"  objective: {objective_words(s.run_steps)}")
    print(f"  {training_words(s.training)}")
    if s.launch:
        shardings = s.space.domains["sharding"].values
        held = ("DistributedDataParallel" if shardings == ["no_shard"] else "FSDP2, fully_shard"
                if "no_shard" not in shardings else "DistributedDataParallel or FSDP2 as sharding says")
        print(f"  launch: every trial runs {s.launch['nproc_per_node']} ranks "
              f"({s.launch['backend']}, {held}) under PyTorch's elastic launcher, "
              f"each pinned to {e.cpu_count} core(s) of the node: num_workers and cpu_threads "
              "count per rank; the memory limit holds per rank")
    for line in fixed_lines(s.space.fixed):
        print(f"  {line}")
    for name, (values, why) in s.space.narrowed.items():
        print(f"  {name} searched over {values} only: {why}")
    sys.stdout.flush()
