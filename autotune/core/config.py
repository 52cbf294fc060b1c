"""The configuration's schema: every key, its type, its default and its explanation, in one
place. The sections travel as they are to what owns them (``WindowConfig`` to each trial's
window, ``StudyConfig`` to the study, ``LaunchConfig`` to the launcher); nothing else restates a
default (tests/test_config_schema.py fails where something does). A default that depends on
the device is ``null`` here with its two values beside it (``BySize``), and ``sized_for``
resolves it once the device is known: a CPU study takes minutes, not hours.

Hydra checks every override against these dataclasses (cli/config.py registers them), so a
misspelt key or a wrong type fails before any trial runs; cross-key checks are
cli/validate.py's. Each key's explanation is its field's ``metadata["help"]``: the
documentation's configuration reference is generated from it (docs/hooks/reference.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True)
class BySize:
    """A default that depends on the device: ``gpu`` on CUDA, ``cpu`` on the CPU."""

    gpu: Any
    cpu: Any

    def words(self) -> str:
        return f"{self.gpu}; on the CPU {self.cpu}"


def _key(default: Any = MISSING, *, help: str, default_factory: Any = MISSING) -> Any:
    """A schema field with its explanation (``metadata["help"]``), which the docs read."""
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _sized(gpu: Any, cpu: Any, *, help: str) -> Any:
    """A key sized for the device: ``null`` until ``sized_for`` gives it ``gpu`` or ``cpu``
    (a value the user set is kept)."""
    size = BySize(gpu, cpu)
    return field(default=None, metadata={"help": f"{help} null: sized for the device "
                                                 f"({size.words()}).", "sized": size})


@dataclass
class WindowConfig:
    """One trial's training window. Warm-up steps are run and thrown away (compile, cudnn
    autotuning and allocator growth happen there); only the measured steps count."""

    warmup_steps: int | None = _sized(10, 3, help=(
        "Steps run and discarded before measuring."))
    measure_steps: int | None = _sized(40, 16, help=(
        "Measured steps, more while under `min_measure_seconds`."))
    measure_seconds: float | None = _sized(20.0, 5.0, help=(
        "The measured window also stops after this many seconds, so a slow configuration "
        "cannot eat the study's budget; at least `min_measure_steps` are always taken."))
    min_measure_steps: int | None = _sized(5, 4, help=(
        "...but the window does not end before this many measured steps."))
    min_measure_seconds: float = _key(2.0, help=(
        "...and it runs past `measure_steps` (within `measure_seconds`) until this long has "
        "been measured: forty 5 ms steps (0.2 s) hold too few batches for a stable figure (one "
        "prefetched burst skews them)."))
    timeout_s: float = _key(300.0, help=(
        "Wall-clock limit of the whole trial subprocess (import, build, compile, warm-up, "
        "measure)."))
    stall_s: float = _key(120.0, help=(
        "A child that reports no progress for this long is declared hung before `timeout_s`."))
    compile_timeout_s: float = _key(600.0, help=(
        "A trial with torch.compile on gets this much longer, on both limits, for its build "
        "and first step (a cold compile, max-autotune above all, can take minutes)."))
    profile: bool = _key(True, help=(
        "Short torch.profiler capture after the measured window (never inside it)."))
    profile_steps: int | None = _sized(3, 2, help="Steps in that profiler capture.")
    loader_profile: bool = _key(True, help=(
        "A trial whose loop waited on its loader (>= 5% of the step) profiles the loader "
        "alone, in process, after the window: where its time goes (decode, a transform, the "
        "user's code)."))


@dataclass
class StudyConfig:
    name: str | None = _key(None, help=(
        'Default: "<workload>-<device>". Same name + same storage = the study resumes.'))
    storage: str | None = _key(None, help=(
        "Any Optuna storage URL (`postgresql+psycopg://user:pw@host/db`, "
        "`mysql+pymysql://...`, `journal:PATH`); default sqlite:///studies/<name>/study.db. "
        "The environment variable AUTOTUNE_STORAGE is used when this is unset (keeps passwords "
        "out of configs); passwords are never printed or exported."))
    n_trials: int | None = _sized(20, 12, help=(
        "Trials this invocation runs, split across `workers`."))
    timeout_s: float | None = _key(None, help=(
        "Stop starting new trials after this many seconds (null: no limit)."))
    time_budget_s: float | None = _key(None, help=(
        "The whole study's wall time in seconds: search, confirmation and numerics check "
        "(search/loop/budget.py). Trials are started while the next one and what must follow it "
        "fit; about a third is kept for the confirmation and the numerics check (at least "
        "`confirm_runs` rounds; `confirm_budget_s` is cut to what is left). The header states "
        "the plan once the first window is timed, the summary what it cut. null: `n_trials` "
        "and `confirm_budget_s` as set."))
    agent: bool = _key(True, help=(
        "Diagnosis-guided search: enqueue the fix for the best trial's bottleneck."))
    prune: bool = _key(True, help=(
        "Stop trials early that cannot beat the best (Optuna pruner + measured ceilings)."))
    confirm_runs: int = _key(3, help=(
        "After the search, the finalists and the baseline are measured again in rounds (each "
        "once per round, in a random order; search/confirmation/confirm.py; the finalists' "
        "search windows order them but are not a round): at least this many rounds (an "
        "interval needs 3), then until one finalist is left or those left lie within "
        "`indifference` of each other (a fully sequential selection, Kim and Nelson 2001), or "
        "`confirm_budget_s`. 0 rounds = report the search figures."))
    race: bool = _key(False, help=(
        "Race the finalists during the search (search/loop/race.py): after a trial that lands "
        "among them within 15% of the fastest, one round of those close finalists still in "
        "the race and the baseline, and a finalist shown slower than another dropped; the "
        "confirmation starts from those rounds (they count in `confirm_runs`, the selection's "
        "first stage and `confirm_budget_s`, of which the race spends at most half). One worker on "
        "the study's own storage only. Off by default: on a noisy 2-core CPU it did not "
        "shorten the README's study and left a winner found late fewer rounds "
        "(docs/benchmarks.md); where the confirmation ends on precision it is not measured "
        "yet."))
    #: Two re-measurements after a short wait (diagnose/thresholds.py, CONTENDED_WAIT_S):
    #: bounded, so a machine that stays busy is reported as such and the study goes on.
    remeasure_contended: int = _key(2, help=(
        "A search window taken while other processes held the cores or the GPU is measured "
        "again after a short wait, at most this many times (after two trials whose windows "
        "stayed busy, once). 0: each window once, its load named beside it (a GPU shared on "
        "purpose, where waiting does not clear the load)."))
    confirm_top: int = _key(3, help=(
        "Finalists: the fastest distinct configurations measured after the search, and any "
        "other whose search window read within 15% of the fastest (up to twice as many); the "
        "one the intervals support is exported."))
    indifference: float = _key(0.05, help=(
        "The difference in speed not worth a choice (0.05: 5%). The confirmation drops a "
        "finalist once another is shown ahead of it (within `correct_selection`) and stops "
        "when one is left or those left lie within this of each other; the choice among those "
        "goes to fewer changed knobs, then lower memory, and costs at most this. Larger: "
        "fewer rounds."))
    correct_selection: float = _key(0.95, help=(
        "The probability that the confirmation keeps the fastest finalist where it is faster "
        "than the others by `indifference` or more (Kim and Nelson's procedure KN). Lower: "
        "fewer rounds."))
    confirm_precision: float | None = _key(None, help=(
        "null: the rounds stop once the choice is decided, and the exported speedup's 95% "
        "interval is the one measured then (its width said). A fraction (0.05: +-5%): the "
        "answers and the baseline are then measured on until their intervals over the "
        "baseline are that narrow, within `confirm_budget_s`."))
    confirm_budget_s: float = _key(300.0, help=(
        "...and the rounds' windows take at most this many seconds (a round that would end "
        "past it is not started; the choice among finalists within `indifference` of each "
        "other is made inside it). At the budget, finalists the rounds did not decide "
        "between are said, and the fastest measured is exported."))
    run_steps: int | None = _key(None, help=(
        "The length of the user's run in training steps, if known: the objective becomes the "
        "whole run's samples/s, compile time included (compile + run_steps x batch / "
        "throughput), so a compile mode wins only where the run repays its compile. null: "
        "steady-state speed."))
    out_dir: str = _key("studies", help=(
        "Where best.yaml, trials.csv and traces go: <out_dir>/<name>/"))
    compare_to: str | None = _key(None, help=(
        "Nightly comparison (autotune/results/compare.py): an earlier study to put side by "
        "side in the report; exit code 3 on a regression (see `regression_pct`); a study that "
        "is not there (yet) is a warning."))
    compare_storage: str | None = _key(None, help=(
        "The storage URL of `compare_to` when it is not this study's (default: "
        "`study.storage`/`$AUTOTUNE_STORAGE`, else sqlite:///studies/<compare_to>/study.db)."))
    regression_pct: float = _key(10.0, help=(
        "A regression: the best samples/sec down by more than this many percent (or a changed "
        "device, torch, CUDA or library version)."))
    keep_global_batch: bool = _key(False, help=(
        "Keep every trial at the workload's global batch G (its batch_size x its own gradient "
        "accumulation): knobs.batch_size becomes the micro-batch (G, G/2, ... G/8 and yours) "
        "and G / batch_size gradient-accumulation steps keep every trial's optimizer step at G "
        "samples (best.yaml: global_batch, grad_accum). false: batch_size is searched freely; "
        "a workload that accumulates still has its micro-batches that divide G accumulate to "
        "it (the same training), and any other (larger, or smaller and not a divisor) is a "
        "global batch of its own."))
    training: str = _key("any", help=(
        "Which of the study's two answers best.yaml holds. `any`: the fastest configuration, "
        "whatever it changes in training (a larger batch: fewer optimizer steps per epoch at "
        "the same learning rate). `same`: the fastest that trains the same model as yours "
        "(knobs of class speed and numerics only at your global batch: micro-batch x "
        "accumulation x ranks; each knob's class is in the knob reference). Both are "
        "confirmed with their own interval; the other is written beside best.yaml as "
        "best-same-training.yaml (any) or best-any-training.yaml (same) where it is another "
        "configuration."))
    numerics_steps: int = _key(10, help=(
        "Numerics check before export (autotune/search/checks/numerics.py): each exported "
        "finalist's first N optimizer steps against your own configuration's (your numerics "
        "at the finalist's batch size, fed as the finalist is: its DataLoader workers, "
        "prefetch, pinning) at up to 3 seeds, in trial subprocesses: a finalist within "
        "2t/(3+t) of your run at its own seed (t its tolerance floor: 6.45% at AMP's 10%) "
        "passes whatever your other seeds would read, and they are not run. A finalist is "
        "refused only when "
        "its loss over the last N/2 steps lies further from your runs' mean than 3x their "
        "seed-to-seed spread (at least its knob family's study.numerics_tolerance), at two "
        "seeds; a non-finite loss is refused, and a reference that diverges leaves the "
        "finalist unchecked. A refused finalist is not exported and the next one is; where "
        "that leaves an answer slower, the refused one's speed knobs with your arithmetic "
        "are measured, confirmed and exported (the speed-only answer). Figures in best.yaml "
        "(`numerics`), the summary and the report. 0: off."))
    numerics_tolerance: dict[str, float] = _key(default_factory=dict, help=(
        "The least relative deviation of the loss over the last steps allowed, by the knob "
        "families a configuration changes (the loosest applies); your own runs' spread "
        "widens it. Keys: default, amp, compile, cuda_graphs, device_transform, tf32, "
        "attention, padding_free, comm_hook, sharding, fsdp_param_dtype, fsdp_reduce_dtype; "
        "defaults (default 0.05, amp and fsdp_param_dtype 0.10, the others 0.05) and their "
        "measured starting points in autotune/search/checks/numerics.py."))
    start_from: str | None = _key(None, help=(
        "Enqueue this earlier study's best configuration right after the baseline (same "
        "storage rule as `compare_to`)."))


@dataclass
class MemoryConfig:
    limit_gb: float | None = _key(None, help=(
        "Peak memory a configuration may use, in GB: this if set, else `limit_fraction` of "
        "the device's."))
    limit_fraction: float = _key(0.9, help=(
        "...else this fraction of the device's memory (GPU memory; host RAM on CPU)."))


@dataclass
class KnobsConfig:
    """Per knob: null = search its whole valid domain; a value = pin it; a list = search only
    those values. Each knob's meaning and domain is its entry in the registry
    (autotune/core/knobs.py), which the documentation's knob reference is generated from."""

    num_workers: Any = None
    pin_memory: Any = None
    prefetch_factor: Any = None
    persistent_workers: Any = None
    batch_size: Any = None
    transfer_dtype: Any = None
    transform_split: Any = None
    non_blocking: Any = None
    amp: Any = None
    compile: Any = None
    cuda_graphs: Any = None
    channels_last: Any = None
    set_to_none: Any = None
    optimizer: Any = None
    optimizer_impl: Any = None
    tf32: Any = None
    cudnn_benchmark: Any = None
    expandable_segments: Any = None
    host_allocator: Any = None
    cpu_threads: Any = None
    sharding: Any = None
    bucket_cap_mb: Any = None
    gradient_as_bucket_view: Any = None
    batched_grad_copy: Any = None
    static_graph: Any = None
    broadcast_buffers: Any = None
    comm_hook: Any = None
    accumulation_no_sync: Any = None
    fsdp_wrap_blocks: Any = None
    fsdp_param_dtype: Any = None
    fsdp_reduce_dtype: Any = None
    fsdp_prefetch: Any = None
    fsdp_cpu_offload: Any = None
    attention: Any = None
    liger_kernel: Any = None
    activation_checkpointing: Any = None
    checkpoint_reentrant: Any = None
    length_grouping: Any = None
    padding_free: Any = None
    pad_to_multiple_of: Any = None


@dataclass
class LaunchConfig:
    """How the production run is launched, and so how every trial runs: nproc_per_node ranks
    per node through PyTorch's elastic launcher (torchrun's engine), gloo on CPU and NCCL on
    CUDA. 1 x 1: one process, as before."""

    nproc_per_node: int = _key(1, help=(
        "Ranks per node each trial runs as (torchrun's --nproc-per-node); above 1 the DDP "
        "knobs are searched."))
    nnodes: int = _key(1, help=(
        "Nodes each trial runs on (torchrun's --nnodes). Above 1, this node hosts each "
        "trial's rendezvous at `rdzv_endpoint` and every other node runs `autotune follow "
        "<study dir>` (docs/cluster.md)."))
    rdzv_endpoint: str | None = _key(None, help=(
        "host:port of each trial's c10d rendezvous (torchrun's --rdzv-endpoint). Several "
        "nodes: required, this node's own host; one node: unset picks a free port per "
        "trial."))
    scaling: bool = _key(False, help=(
        "After the search, measure the exported configuration as one rank alone too (rank 0's "
        "share of the cores, its GPU on CUDA), in interleaved rounds with the ranks: the "
        "scaling efficiency, N ranks' samples/s over N x one rank's, with its interval."))
    rdzv_timeout_s: int = _key(30, help=(
        "Seconds the ranks wait to meet before the trial fails."))
    collective_timeout_s: int = _key(60, help=(
        "Seconds a collective waits on a peer before the trial fails."))


@dataclass
class Config:
    workload: Any = _key(
        default_factory=lambda: {"_target_": "autotune.workloads.mlp.MLPWorkload"}, help=(
            "The workload: a config-group option (`resnet18`, `gpt`, `mlp`, `jpeg`; "
            "autotune/conf/workload/) or a node with `_target_` (a factory returning a "
            "Workload) and its arguments, e.g. `workload.image_size=64` (setting any argument "
            "disables the CPU-sized defaults)."))
    device: str = _key("auto", help="cpu | cuda | auto (cuda when available).")
    seed: int = _key(0, help="Sampler and data seed.")
    workers: Any = _key(1, help=(
        'Parallel trial workers in this invocation: an int, or "auto" = one per visible GPU. '
        "More than one needs PostgreSQL/MySQL or journal: storage."))
    tracking: Any = _key(default_factory=list, help=(
        "Experiment trackers the finished study is published to (autotune/results/tracking.py): "
        "a list of `mlflow`, `tensorboard`, `wandb` (`tracking=[mlflow,wandb]`; one name alone "
        "too). One parent run for the study (the answers' speedups with their 95% intervals, "
        "the nightly verdict, best.yaml and the report as artifacts) and one per trial. Where "
        "each one writes is its own environment's (MLFLOW_TRACKING_URI, WANDB_MODE, "
        "AUTOTUNE_TENSORBOARD_DIR); a tracker not installed or not reachable is said once and "
        "never fails the study. `autotune track STUDY` publishes a stored study afterwards."))
    study: StudyConfig = _key(default_factory=StudyConfig, help="The search (study.*).")
    window: WindowConfig = _key(default_factory=WindowConfig, help=(
        "One trial's training window (window.*)."))
    memory: MemoryConfig = _key(default_factory=MemoryConfig, help=(
        "The memory limit (memory.*)."))
    knobs: KnobsConfig = _key(default_factory=KnobsConfig, help=(
        "Per knob: null searches the knob's valid domain; a value pins it; a list narrows it."))
    launch: LaunchConfig = _key(default_factory=LaunchConfig, help=(
        "How each trial is launched (launch.*)."))

    def __post_init__(self) -> None:
        self.tracking = tracker_names(self.tracking)


#: The experiment trackers ``tracking`` may name (autotune/results/tracking.py publishes to each).
TRACKERS = ("mlflow", "tensorboard", "wandb")


def tracker_names(value: Any) -> list[str]:
    """``tracking`` as a list of tracker names: a list, or one name alone (``tracking=mlflow``),
    each checked here because the key is typed ``Any`` to take both forms; a ValueError naming
    the valid trackers otherwise (the command line's composition says it as a usage error)."""
    if value is None or isinstance(value, str):
        names = [value] if value else []
    elif isinstance(value, (list, tuple)):
        names = list(value)
    else:
        names = [value]
    wrong = [n for n in names if n not in TRACKERS]
    if wrong:
        raise ValueError(
            f"tracking={value!r}: {', '.join(repr(n) for n in wrong)} is not an experiment "
            f"tracker autotune publishes to. Valid trackers: {', '.join(TRACKERS)} "
            "(tracking=[mlflow,tensorboard,wandb], or one name alone); [] publishes to none")
    return list(dict.fromkeys(str(n) for n in names))




def sized_for(cfg: S, device: str) -> S:
    """``cfg`` (the whole configuration or one of its sections) with every key left ``null``
    for the device given its size there (``BySize``): the one place a device-sized default
    is decided. A value the user set is kept."""
    if isinstance(cfg, Config):
        return dataclasses.replace(cfg, window=sized_for(cfg.window, device),  # type: ignore[return-value]
                                   study=sized_for(cfg.study, device))
    sizes = {f.name: f.metadata["sized"] for f in dataclasses.fields(cfg)  # type: ignore[arg-type]
             if "sized" in f.metadata and getattr(cfg, f.name) is None}
    return dataclasses.replace(cfg, **{  # type: ignore[type-var]
        name: size.cpu if device == "cpu" else size.gpu for name, size in sizes.items()})


def left_to_size(cfg: Config) -> list[str]:
    """The device-sized keys this configuration leaves to the device (``window.measure_steps``,
    ...): what the header names as the CPU-sized defaults a run took."""
    return [f"{prefix}.{f.name}" for prefix, section in (("window", cfg.window),
                                                         ("study", cfg.study))
            for f in dataclasses.fields(section)
            if "sized" in f.metadata and getattr(section, f.name) is None]


def sized(value: T | None) -> T:
    """A device-sized key's value, read where ``sized_for`` has run (every trial's window and
    the study after the command line): ``None`` there is a bug, said as one."""
    if value is None:
        raise RuntimeError("a device-sized configuration key was read before "
                           "autotune.core.config.sized_for resolved it")
    return value
