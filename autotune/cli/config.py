"""Structured config schemas, registered in Hydra's ConfigStore.

Hydra checks every override against these dataclasses, so a misspelt key or a wrong type fails
before any trial runs. The YAML in ``conf/`` only picks values; the schema lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from autotune.core.knobs import KNOBS


@dataclass
class WindowConfig:
    """One trial's training window. Warm-up steps are run and thrown away (compile, cudnn
    autotuning and allocator growth happen there); only the measured steps count."""

    warmup_steps: int = 10
    measure_steps: int = 40
    # The measured window also stops after this many seconds, so a slow configuration cannot
    # eat the study's budget; at least `min_measure_steps` are always taken.
    measure_seconds: float = 20.0
    min_measure_steps: int = 5
    # ...and it runs past measure_steps until this long has been measured: forty 5 ms steps
    # (0.2 s) hold too few batches for a stable figure (one prefetched burst skews them).
    min_measure_seconds: float = 2.0
    # Wall-clock limit of the whole trial subprocess (import, build, compile, warm-up, measure).
    timeout_s: float = 300.0
    # A child that reports no progress for this long is declared hung before `timeout_s`.
    stall_s: float = 120.0
    # A trial with torch.compile on gets this much longer, on both limits, for its build and
    # first step (a cold compile, max-autotune above all, can take minutes).
    compile_timeout_s: float = 600.0
    # Short torch.profiler capture after the measured window (never inside it).
    profile: bool = True
    profile_steps: int = 3
    # A trial whose loop waited on its loader (>= 5% of the step) profiles the loader alone,
    # in process, after the window: where its time goes (decode, a transform, the user's code).
    loader_profile: bool = True


@dataclass
class StudyConfig:
    # Default: "<workload>-<device>". Same name + same storage = the study resumes.
    name: str | None = None
    # Any Optuna storage URL; default sqlite:///studies/<name>/study.db. The environment
    # variable AUTOTUNE_STORAGE is used when this is unset (keeps passwords out of configs).
    storage: str | None = None
    n_trials: int = 20
    timeout_s: float | None = None
    # Diagnosis-guided search: enqueue the fix for the best trial's bottleneck.
    agent: bool = True
    # Stop trials early that cannot beat the best (Optuna pruner + measured ceilings).
    prune: bool = True
    # After the search, the confirm_top fastest configurations and the baseline are measured
    # again in rounds, in a random order each round (search/confirm.py): at least confirm_runs
    # rounds, then more until every finalist's 95% interval of its speedup over the baseline is
    # within +-confirm_precision (0.05: +-5%) or confirm_budget_s seconds of confirmation are
    # spent. Intervals need 3 rounds, a stop on precision 6 (confirm.PRECISE_ROUNDS); 0 rounds =
    # report the search figures. A tie the tie-break would decide against the leader then gets
    # up to half the budget again (confirm.TIE_BUDGET_SHARE).
    confirm_runs: int = 3
    confirm_top: int = 3
    confirm_precision: float = 0.05
    confirm_budget_s: float = 300.0
    # The length of the user's run in training steps, if known: the objective becomes the
    # whole run's samples/s, compile time included (compile + run_steps x batch / throughput),
    # so a compile mode wins only where the run repays its compile. null: steady-state speed.
    run_steps: int | None = None
    # Where best.yaml, trials.csv and traces go: <out_dir>/<name>/
    out_dir: str = "studies"
    # Nightly comparison (autotune/results/compare.py): an earlier study to put side by side in the
    # report; exit code 3 when the best samples/sec fell by more than regression_pct percent or
    # the environment changed. compare_storage: its storage URL when it is not this study's
    # (default: this study's storage, or studies/<compare_to>/study.db with the default SQLite).
    compare_to: str | None = None
    compare_storage: str | None = None
    regression_pct: float = 10.0
    # Keep the global batch: the workload's batch_size is the global batch G; knobs.batch_size
    # becomes the micro-batch (G, G/2, ... G/8) and G / batch_size gradient-accumulation steps
    # keep every trial's optimizer step at G samples (best.yaml: global_batch, grad_accum).
    # false: batch_size is searched freely (it changes training dynamics).
    keep_global_batch: bool = False
    # Numerics check before export (autotune/search/numerics.py): each finalist's first numerics_steps
    # optimizer steps against the baseline's numerics from the same seed and data order; one
    # whose relative loss deviation exceeds its knob family's tolerance is not exported.
    # numerics_steps=0 turns the check off.
    numerics_steps: int = 10
    # Keys: default, amp, compile, cuda_graphs, device_transform, tf32 (defaults in numerics.py).
    numerics_tolerance: dict[str, float] = field(default_factory=dict)
    # Enqueue this earlier study's best configuration right after the baseline (same storage
    # rule as compare_to).
    start_from: str | None = None


@dataclass
class MemoryConfig:
    # Peak memory a configuration may use: limit_gb if set, else limit_fraction of the device.
    limit_gb: float | None = None
    limit_fraction: float = 0.9


@dataclass
class KnobsConfig:
    """Per knob: null = search its whole valid domain; a value = pin it; a list = search only
    those values. See autotune/core/knobs.py for each knob's meaning and domain."""

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
    optimizer_impl: Any = None
    tf32: Any = None
    cudnn_benchmark: Any = None
    host_allocator: Any = None
    cpu_threads: Any = None
    bucket_cap_mb: Any = None
    gradient_as_bucket_view: Any = None
    static_graph: Any = None
    broadcast_buffers: Any = None
    attention: Any = None
    activation_checkpointing: Any = None
    length_grouping: Any = None
    padding_free: Any = None
    pad_to_multiple_of: Any = None


@dataclass
class LaunchConfig:
    """How the production run is launched, and so how every trial runs: nproc_per_node ranks
    per node through PyTorch's elastic launcher (torchrun's engine), gloo on CPU and NCCL on
    CUDA. 1 x 1: one process, as before."""

    nproc_per_node: int = 1
    nnodes: int = 1
    # Several nodes: every node's autotune runs the same study with the same endpoint
    # (host:port of a c10d rendezvous), as torchrun's --rdzv-endpoint; one node: a free port.
    rdzv_endpoint: str | None = None
    # Seconds the ranks wait to meet, and a collective waits on a peer, before the trial fails.
    rdzv_timeout_s: int = 30
    collective_timeout_s: int = 60


@dataclass
class Config:
    # The workload: a node with `_target_` (a factory returning a Workload) and its arguments.
    workload: Any = field(default_factory=lambda: {"_target_": "autotune.workloads.mlp.MLPWorkload"})
    device: str = "auto"  # cpu | cuda | auto (cuda when available)
    seed: int = 0
    # Parallel trial workers in this invocation: an int, or "auto" = one per visible GPU.
    workers: Any = 1
    study: StudyConfig = field(default_factory=StudyConfig)
    window: WindowConfig = field(default_factory=WindowConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    knobs: KnobsConfig = field(default_factory=KnobsConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)


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


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="autotune_schema", node=Config)
    # `autotune --help` (conf/hydra/help/autotune.yaml) lists these from their sources.
    OmegaConf.register_new_resolver("autotune_workloads", _workloads_line, replace=True)
    OmegaConf.register_new_resolver("autotune_knobs", _knobs_block, replace=True)
