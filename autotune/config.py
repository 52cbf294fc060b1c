"""Structured config schemas, registered in Hydra's ConfigStore.

Hydra checks every override against these dataclasses, so a misspelt key or a wrong type fails
before any trial runs. The YAML in ``conf/`` only picks values; the schema lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


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
    # After the search, re-run the confirm_top fastest configurations and the baseline this
    # many times each (in turn); the finalist with the best median wins and best.yaml reports
    # those medians. 0 = report the search figures.
    confirm_runs: int = 2
    confirm_top: int = 3
    # Where best.yaml, trials.csv and traces go: <out_dir>/<name>/
    out_dir: str = "studies"


@dataclass
class MemoryConfig:
    # Peak memory a configuration may use: limit_gb if set, else limit_fraction of the device.
    limit_gb: float | None = None
    limit_fraction: float = 0.9


@dataclass
class KnobsConfig:
    """Per knob: null = search its whole valid domain; a value = pin it; a list = search only
    those values. See autotune/knobs.py for each knob's meaning and domain."""

    num_workers: Any = None
    pin_memory: Any = None
    prefetch_factor: Any = None
    persistent_workers: Any = None
    batch_size: Any = None
    transfer_dtype: Any = None
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


@dataclass
class Config:
    # The workload: a node with `_target_` (a factory returning a Workload) and its arguments.
    workload: Any = field(default_factory=lambda: {"_target_": "workloads.mlp.MLPWorkload"})
    device: str = "auto"  # cpu | cuda | auto (cuda when available)
    seed: int = 0
    # Parallel trial workers in this invocation: an int, or "auto" = one per visible GPU.
    workers: Any = 1
    study: StudyConfig = field(default_factory=StudyConfig)
    window: WindowConfig = field(default_factory=WindowConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    knobs: KnobsConfig = field(default_factory=KnobsConfig)


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="autotune_schema", node=Config)
