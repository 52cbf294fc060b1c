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
from autotune.cli.validate import resolve_workers, validate
from autotune.core.config import LaunchConfig, left_to_size, sized, sized_for
from autotune.core.console import LOG_FILE, WIDTH, detail, fit, fit_items, say, study_log
from autotune.core.env import DeviceError, Env, probe
from autotune.core.global_batch import accumulation, declared_accumulation, study_global_batch
from autotune.core.knobs import KnobError
from autotune.core.space import build_space, keep_global_batch, without_accumulation
from autotune.core.workload import WorkloadError, build_workload, workload_name
from autotune.measure.launch import probe_env, start_server_soon
from autotune.measure.protocol import NODES_STOP_FILE, spans_nodes
from autotune.results.compare import CompareError, load_other, start_knobs
from autotune.results.record import study_attrs
from autotune.results.storage import (
    ENV_VAR,
    StorageError,
    open_storage,
    redact,
    resolve_url,
)
from autotune.results.trials import ANSWER_FILES
from autotune.search.loop.conditions import ChangedConditions, check_resumable
from autotune.search.run import run_study
from autotune.search.setup import StudySetup, launch_spec

log = logging.getLogger("autotune")

def _overridden(overrides: list[str], prefix: str) -> set[str]:
    keys = set()
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith(prefix):
            keys.add(key[len(prefix):])
    return keys


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


def workload_spec(cfg: Config, overrides: list[str]) -> tuple[dict[str, Any], bool]:
    """The workload's config node, and whether the user gave it any argument (sizes: then its
    CPU-sized arguments are not used). A user workload gets only the keys given on the command
    line: the default group's arguments (resnet18's image_size, ...) belong to another
    factory. The workload node is the one section whose keys are the user's factory's, not the
    schema's, so what was typed is read from the overrides here."""
    spec = dict(cfg.workload)
    user_keys = _overridden(overrides, "workload.")
    if "_target_" in user_keys:
        spec = {k: v for k, v in spec.items() if k in user_keys}
    return spec, bool(user_keys - {"_target_"})


def study_place(cfg: Config, device: str, ranks: int, label: str) -> tuple[str, Path, str]:
    """The study's name, folder and storage URL. A run as ranks is measured under other
    conditions than one process (search/loop/conditions.py): by default it gets a study of its
    own rather than a refusal to resume the other."""
    name = cfg.study.name or f"{label}-{device}" + (f"-{ranks}ranks" if ranks > 1 else "")
    out_dir = Path(cfg.study.out_dir) / name
    return name, out_dir, resolve_url(cfg.study.storage, out_dir / "study.db")


def build_setup(cfg: Config, overrides: list[str]) -> tuple[StudySetup, int, int]:
    """The study's setup, its worker count and its trial count: ``cfg`` validated
    (cli/validate.py), sized for the device (core/config.sized_for), its sections handed on
    as they are."""
    spec, sized_by_user = workload_spec(cfg, overrides)
    workload = build_workload(spec)
    probed = _probe(cfg.device)
    label = workload_name(spec)
    name, out_dir, url = study_place(cfg, probed.device,
                                     cfg.launch.nproc_per_node * cfg.launch.nnodes, label)
    validate(cfg, workload, probed, url)
    cfg = sized_for(cfg, probed.device)
    workers = resolve_workers(cfg.workers, probed)
    env = ranked(probed, cfg.launch, workers)
    cpu_sized = False
    if env.device == "cpu" and not sized_by_user:
        small = workload.cpu_sized()
        if small is not workload:
            cpu_sized, workload = True, small
    knob_overrides = {k: v for k, v in dataclasses.asdict(cfg.knobs).items() if v is not None}
    space = build_space(env, workload, knob_overrides)
    # The user's global batch per rank (core/global_batch.py): the baseline's micro-batch x
    # the workload's own accumulation, where the study accumulates.
    micro = int(workload.defaults.get("batch_size", space.baseline["batch_size"]))
    global_batch = study_global_batch(micro, declared_accumulation(workload),
                                      cfg.study.keep_global_batch)
    if global_batch is None:
        space = without_accumulation(space)
    elif cfg.study.keep_global_batch:
        space = keep_global_batch(space, global_batch, micro)
    limit = cfg.memory.limit_gb or cfg.memory.limit_fraction * env.total_memory_gb
    return StudySetup(
        name=name, storage=url, out_dir=out_dir, env=env, space=space, workload_spec=spec,
        workload_label=workload.describe(), study=cfg.study, window=cfg.window,
        launch=cfg.launch, memory_limit_gb=limit, seed=cfg.seed, cpu_sized=cpu_sized,
        image_inputs=workload.image_inputs, global_batch=global_batch,
        framework=getattr(workload, "framework", None), **_nightly(cfg),
    ), workers, sized(cfg.study.n_trials)


def ranked(env: Env, launch: LaunchConfig, workers: int = 1) -> Env:
    """The env each trial's process sees: with N ranks per node, one rank's share of the cores
    (the loader and thread knobs are searched within it, as each rank of the run gets them)
    and torchrun's one OpenMP thread per rank as the baseline's threads; with several workers
    in this invocation (one node), each worker's trials get their own share too (search/run.py
    pins them), so concurrent trials do not measure each other. The launch section is
    validated first (cli/validate.check_launch)."""
    nproc, nnodes = launch.nproc_per_node, launch.nnodes
    share = max(1, env.cpu_count // (nproc * max(1, workers)))
    if nproc * nnodes == 1:
        return env if workers <= 1 else dataclasses.replace(env, cpu_count=share)
    return dataclasses.replace(env, cpu_count=share, torch_threads=1, ranks=nproc * nnodes,
                               nodes=nnodes)


def _nightly(cfg: Config) -> dict[str, Any]:
    """study.compare_to / study.start_from: where the earlier study lives; its best knobs, and
    its device and confirmation (how much this night's rounds will vary: search/round_spread.py),
    as the StudySetup fields they become. A storage that does not answer is a usage error (exit
    2, before any trial); a study that is not in it is a warning and this study runs without
    it, because a nightly schedule's first night, or the night after a missed one, names a
    study that never ran: failing then would lose the night's study too."""
    s = cfg.study
    found: dict[str, Any] = {"earlier": [], "nightly_missing": None}
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
            found["nightly_missing"] = " ".join(filter(None, (found["nightly_missing"], why)))
            continue
        attrs = study_attrs(other)
        found["earlier"].append((f"study '{name}'", {"device": attrs.get("device"),
                                                     "confirmation": attrs.get("confirmation")}))
        if name == s.compare_to:
            found["compare"] = (name, url)
        if name == s.start_from:
            found["start_knobs"] = start_knobs(name, url)
    return found


#: What a user can get wrong before any trial runs: each is one paragraph and exit code 2.
USER_ERRORS = (WorkloadError, KnobError, DeviceError, StorageError, UsageError, CompareError,
               ChangedConditions)


def prepare(cfg: Config, overrides: list[str]) -> tuple[StudySetup, Any, int, int]:
    """The study's setup, its opened storage, workers and trials; a user error raises one of
    USER_ERRORS before anything is written."""
    setup, workers, n_trials = build_setup(cfg, overrides)
    storage = open_storage(setup.storage)
    check_resumable(storage, setup, redact(str(setup.storage)))
    return setup, storage, workers, n_trials


def cpu_defaults_words(cfg: Config, device: str) -> str | None:
    """Which of the CPU-sized defaults this run took (the keys ``cfg`` left to the device), by
    name: a run given study.n_trials=1 was told "1 trials unless window.* / study.n_trials are
    set" (2026-11-28)."""
    if device != "cpu":
        return None
    left, sized_cfg = left_to_size(cfg), sized_for(cfg, device)
    window = [key for key in left if key.startswith("window.")]
    every_window = [key for key in left_to_size(Config()) if key.startswith("window.")]
    parts = []
    if window == every_window:
        parts.append("a CPU-sized window (window.* not set)")
    elif window:
        parts.append("CPU-sized " + ", ".join(
            f"{key}={getattr(sized_cfg.window, key.split('.')[1])}" for key in window)
            + " (not set)")
    if "study.n_trials" in left:
        parts.append(f"{sized_cfg.study.n_trials} trials (study.n_trials not set)")
    return "CPU run: " + " and ".join(parts) if parts else None


def run(cfg: Config, overrides: list[str]) -> int:
    start_server_soon()  # its imports overlap this process's setup (measure/launch.py)
    try:
        setup, storage, workers, n_trials = prepare(cfg, overrides)
    except USER_ERRORS as exc:
        fail(str(exc))
        return 2
    with study_log(setup.out_dir):
        print_header(setup, workers, cpu_defaults_words(cfg, setup.env.device))
        try:
            code = run_study(setup, storage, n_trials, workers)
        except Exception as exc:  # noqa: BLE001 - an unattended run ends with one paragraph
            return explain(exc, setup.out_dir, str(setup.storage))
        finally:
            if spans_nodes(setup.launch):  # the other nodes' followers exit (measure/nodes.py)
                (setup.out_dir / NODES_STOP_FILE).write_text(f"study {setup.name} ended\n")
        publish_study(cfg.tracking, setup, storage)
    return code


def publish_study(trackers: list[str], setup: StudySetup, storage: Any) -> None:
    """The study as it ended (finished, interrupted or regressed) to the experiment trackers
    ``tracking`` names (results/tracking.py), with the nightly verdict where study.compare_to
    found the earlier study. Nothing here changes the exit code: a tracker's trouble is one
    warning line, and the study's results stand in its folder and storage."""
    if not trackers:
        return
    import optuna

    from autotune.results.compare import compare_studies
    from autotune.results.tracking import publish

    try:
        study = optuna.load_study(study_name=setup.name, storage=storage)
        comparison: dict[str, Any] | None = (
            compare_studies(study, *setup.compare, setup.study.regression_pct) if setup.compare
            else {"missing": setup.nightly_missing} if setup.nightly_missing else None)
        publish(study, setup.out_dir, str(setup.storage), trackers, comparison)
    except Exception as exc:  # noqa: BLE001 - publishing never costs the study its result
        log.warning("tracking: the study was not published (%s: %s); `autotune track %s "
                    "tracking=[%s]` publishes it later", type(exc).__name__,
                    redact(" ".join(str(exc).split()))[:300], setup.out_dir, ",".join(trackers))


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


def global_batch_words(s: StudySetup) -> str:
    """The header's statement of the user's global batch, in a study that accumulates
    (core/global_batch.py): what a trial's batch_size is, and what the same training is."""
    g, micro = int(s.global_batch or 0), int(s.space.baseline["batch_size"])
    over = f", {g * s.env.ranks} over {s.env.ranks} ranks" if s.env.ranks > 1 else ""
    how = ("study.keep_global_batch" if s.study.keep_global_batch and micro == g else
           f"your micro-batch {micro} x {accumulation(g, micro)} accumulation steps")
    return (f"global batch: {g} per rank{over} ({how}): a trial's batch_size is a micro-batch, "
            f"accumulated to {g} where it divides it (the same training); any other (larger, "
            "or smaller and not a divisor) is a global batch of its own")


def fixed_lines(fixed: dict[str, tuple[Any, str]]) -> list[str]:
    """The knobs the study does not search, one line per reason: a one-process CPU study
    listed seven DDP knobs on seven lines with the same reason (2026-11-28)."""
    by_why: dict[str, list[str]] = {}
    for name, (value, why) in fixed.items():
        by_why.setdefault(why, []).append(f"{name}={value}")
    return [f"fixed {', '.join(knobs)}: {why}" for why, knobs in by_why.items()]


def print_header(s: StudySetup, workers: int, cpu_defaults: str | None) -> None:
    """At most five lines at a glance (what is tuned on what, the knobs searched, the answers,
    the time expected: cost.plan_words' brief); the settings behind them, and why each knob
    not searched is fixed, are details (autotune.log, or -v)."""
    e = s.env
    say(fit(f"autotune: study '{s.name}' on {e.device} ({e.device_name}, "
            f"{e.total_memory_gb:.1f} GB, torch {e.torch_version})"))
    say(fit(f"  workload: {s.workload_label}"))
    searched = [name for name in s.space.domains if name not in s.space.fixed]
    fixed = f"; {len(s.space.fixed)} fixed here (why: -v)"
    head = f"  searching {len(searched)} knobs: "
    say(head + fit_items(searched, WIDTH - len(head) - len(fixed), ", ") + fixed)
    say(fit(f"  answers: best.yaml and {ANSWER_FILES['same']}; memory limit "
            f"{s.memory_limit_gb:.2f} GB; details: {s.out_dir / LOG_FILE}"))
    for line in header_details(s, workers, cpu_defaults):
        detail(f"  {line}")
    sys.stdout.flush()


def header_details(s: StudySetup, workers: int, cpu_defaults: str | None) -> list[str]:
    """The study's settings in full, for autotune.log (and the console with -v)."""
    e, w = s.env, s.window
    out = []
    if s.cpu_sized:
        out.append("CPU run with no sizes set: using the workload's CPU-sized defaults "
                   "(set any workload.* key to choose sizes yourself)")
    if cpu_defaults:
        out.append(cpu_defaults)
    out.append(f"window: {w.warmup_steps} warm-up steps, {w.measure_steps} measured steps (at "
               f"least {w.min_measure_seconds}s, at most {w.measure_seconds}s); timeout "
               f"{w.timeout_s}s per trial")
    out.append(f"memory limit: {s.memory_limit_gb:.2f} GB; storage: {redact(str(s.storage))}; "
               f"workers: {workers}")
    out.append(f"objective: {objective_words(s.study.run_steps)}")
    out.append(training_words(s.study.training))
    if s.global_batch:
        out.append(global_batch_words(s))
    if s.env.ranks > 1:
        shardings = s.space.domains["sharding"].values
        held = ("DistributedDataParallel" if shardings == ["no_shard"] else "FSDP2, fully_shard"
                if "no_shard" not in shardings else "DistributedDataParallel or FSDP2 as sharding says")
        out.append(f"launch: every trial runs {s.launch.nproc_per_node} ranks "
                   f"({launch_spec(s.launch, e)['backend']}, {held}) under PyTorch's elastic "
                   f"launcher, each pinned to {e.cpu_count} core(s) of the node: num_workers and "
                   "cpu_threads count per rank; the memory limit holds per rank")
    out += fixed_lines(s.space.fixed)
    out += [f"{name} searched over {values} only: {why}"
            for name, (values, why) in s.space.narrowed.items()]
    return out
