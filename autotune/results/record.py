"""What a study stores: the one declaration of its Optuna user attributes, with their types.

A trial's attributes are written by the driver (``autotune.search``) and read by everything
that reports on a study, on any storage, long after the run; the study's own attributes say
what was tuned, on what, and what the confirmation and the numerics check found. Every read and
write goes through ``trial_attrs`` / ``set_trial_attrs`` / ``study_attrs`` /
``set_study_attrs``, so mypy checks each key against these declarations (a misspelt key is a
type error, not a silently missing column), and ``tests/test_record.py`` checks that no module
writes a key by its string alone.

Values are JSON (Optuna stores user attributes as JSON): numbers, strings, lists, dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypedDict, cast

from optuna.trial import FrozenTrial

Source = Literal["baseline", "sampler", "agent", "requeue", "start_from", "same_training",
                 "speed_only"]


class OwnerAttrs(TypedDict, total=False):
    """Who runs a trial (ownership among workers), why it was asked, and with which knobs."""

    owner_host: str
    owner_pid: int
    owner_start: float
    owner_cpus: list[int]  # the cores a worker's trials are pinned to (several on one node)
    heartbeat: float  # time.time() of the owner's last sign of life
    source: Source
    agent_reason: str  # the diagnosis fix the agent enqueued it for
    requeue_of: int  # the lost trial whose configuration it runs again
    knobs: dict[str, Any]  # every knob's value, fixed ones included
    measuring: bool  # its window started (a twin waits for it rather than measuring again)
    duplicate_of: int  # a twin: the trial whose outcome it reuses


class WindowAttrs(TypedDict, total=False):
    """What a trial's window measured (measure/protocol.WindowResult, stored by
    search/window_record.window_attrs)."""

    outcome: str
    reason: str  # "" when ok; else "<outcome>: <why>"
    samples_per_sec: float
    # over the user's run, compile time included, in the trial's ``unit`` (the name is older)
    effective_samples_per_sec: float
    # Tokens (measure/protocol.WindowResult): the unit of the trial's value, chunks and
    # ceilings ("tokens/s" or "samples/s"; absent: samples/s, a trial stored before units),
    # real tokens/s, real and computed tokens, the padding share of the computed tokens and
    # per batch, and a length-grouped loader's whole mega-batches in the window.
    unit: str
    tokens_per_sec: float
    tokens: int
    tokens_computed: int
    padding_share: float | None
    padding_batches: dict[str, float]
    length_groups: dict[str, int]
    step_ms: dict[str, float]
    peak_memory_gb: float
    compile_s: float
    compile_cache: dict[str, int]
    final_loss: float | None
    timers: dict[str, float | None]
    chunks: list[float]
    wall_s: float
    extras_s: float  # ceilings, profiles, all-reduce probe: what a confirmation window skips
    warmup_s: float  # the window's warm-up steps (search/console/estimate.py: a numerics run's start-up)
    measure_s: float  # its measured steps
    trace: dict[str, Any]
    stderr_tail: str
    contention: dict[str, Any]  # measure/contention.between: the load while it measured
    input_shapes: dict[str, Any]  # core/batch.ShapeLog.summary: the shapes its steps saw
    comm: dict[str, Any]  # measure/comm.exposed: the all-reduce's share of the step (ranks)
    ranks: list[dict[str, Any]]  # measure/ranks.merge: each rank's figures, slowest first
    loader_profile: dict[str, Any]  # measure/loader_profile.stored_profile: where the loader's time goes
    top_kernels: list[dict[str, Any]]  # the profiler's top kernels by GPU time (Nsight's targets)
    optimizer: str  # the optimizer's class name as the trial built it (core/effects.py's rule)
    signal: str
    exit_code: int


class ReadingAttrs(TypedDict, total=False):
    """What the driver made of a trial's window: its ceilings, their noise, the diagnosis."""

    ceilings: dict[str, float]
    ceiling_noise: dict[str, float]
    ceiling_violation: str
    fraction_of_ceiling: float
    diagnosis: dict[str, Any]


class TrialAttrs(OwnerAttrs, WindowAttrs, ReadingAttrs, total=False):
    """One trial's record: who ran it, what its window measured, what the driver read in it."""


#: What a trial's window and the driver's reading of it recorded: all a twin (the same knobs,
#: measured by another worker's trial) copies from the trial that measured them, so that a
#: twin's record reads as a fresh one to the confirmation, the estimate and the export.
MEASURED_KEYS: frozenset[str] = frozenset(WindowAttrs.__annotations__) | frozenset(
    ReadingAttrs.__annotations__)


class StudyAttrs(TypedDict, total=False):
    """The study's record (besides the ceiling cache, whose keys are ``pruning.ceiling_key``)."""

    workload: str  # the workload's one-line description
    unit: str  # the objective's unit, set by the first measured trial (absent: samples/s)
    workload_target: str | None  # its factory's import path
    workload_arguments: dict[str, Any]  # its factory's arguments (search/loop/conditions.py)
    framework: str  # "hf": a script study's Trainer, tuned through its arguments
    device: dict[str, Any]  # autotune.core.env.Env.to_dict()
    versions: dict[str, Any]  # library versions (the nightly comparison reads them)
    fixed_knobs: dict[str, Any]  # knob -> [value, why]
    input_stages: int
    memory_limit_gb: float
    run_steps: int | None
    global_batch: int  # per rank, where the study accumulates (core/global_batch.py)
    keep_global_batch: bool  # study.keep_global_batch as the run that recorded it had it
    training: str  # study.training: which answer best.yaml holds ("any" or "same")
    superseded: list[int]  # crashed baselines a later run replaced
    confirmation: dict[str, Any]
    race: dict[str, Any]  # the search's race: its rounds and dropped contenders (search/loop/race.py)
    numerics: dict[str, Any]
    wall: dict[str, Any]  # this run's expected and measured wall time (search/console/cost.py)
    budget_stop: dict[str, Any]  # why a run's search stopped early (study.time_budget_s)
    budget_plan: dict[str, Any]  # the plan made from a run's first window (search/loop/budget.py)
    time_budget: dict[str, Any]  # the budget, the wall time, what it cut (search/loop/budget.py)
    launch: dict[str, Any]  # each trial's ranks (search/setup.launch_spec); absent: one process
    scaling: dict[str, Any]  # launch.scaling: the exported configuration as one rank too


class _Settable(Protocol):
    def set_user_attr(self, key: str, value: Any) -> None: ...


def trial_attrs(trial: FrozenTrial | Any) -> TrialAttrs:
    """A trial's record, typed (``optuna.Trial`` or ``FrozenTrial``)."""
    return cast(TrialAttrs, trial.user_attrs)


def set_trial_attrs(trial: _Settable, attrs: TrialAttrs) -> None:
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def study_attrs(study: Any) -> StudyAttrs:
    """The study's record, typed (``optuna.Study``)."""
    return cast(StudyAttrs, study.user_attrs)


def set_study_attrs(study: _Settable, attrs: StudyAttrs) -> None:
    for key, value in attrs.items():
        study.set_user_attr(key, value)


def set_stored_trial_attrs(storage: Any, trial_id: int, attrs: TrialAttrs) -> None:
    """Through the storage, for a trial this process holds no ``Trial`` of (the heartbeat, a
    dead worker's trial)."""
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)


#: The study's ceiling cache (search/pruning.ceiling_key and its noise): one key per
#: configuration's loader or compute knobs, so a family of keys rather than declared names.
CEILING_CACHE = ("ceiling.", "ceiling_noise.")


def declared(attrs: Mapping[str, Any], kind: type = TrialAttrs) -> list[str]:
    """The keys of ``attrs`` that ``kind`` does not declare (a test's check on a real study);
    the study's ceiling cache is declared as its family of keys."""
    families = CEILING_CACHE if kind is StudyAttrs else ()
    return sorted(k for k in set(attrs) - set(kind.__annotations__)
                  if not k.startswith(families))
