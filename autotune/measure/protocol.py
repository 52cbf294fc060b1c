"""The process boundary: ``TrialRequest`` (driver → trial) and ``WindowResult`` (trial →
driver), both plain data that serialize and parse themselves, and the words both sides use to
name an out-of-memory failure."""

from __future__ import annotations

import json
import math
import signal
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from autotune.core.config import LaunchConfig, WindowConfig

R = TypeVar("R", bound="_Record")

#: Text that names an out-of-memory failure: the trial's exception (``window.is_oom``) or, when
#: the child died before it could say, its stderr (``runner``). CUDA, cuDNN, cuBLAS, the CPU
#: allocator and Python's own MemoryError.
OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
               "std::bad_alloc", "OutOfMemoryError", "can't allocate memory", "MemoryError")


def mentions_oom(text: str) -> bool:
    return any(m in text for m in OOM_MARKERS)


def figure_only(window: WindowConfig) -> WindowConfig:
    """The window of a request that is only a figure (a confirmation round's, a scaling
    round's): no profiler capture, no loader profile; its request also skips, under several
    ranks, the all-reduce's counterfactual (``TrialRequest.comm``: measure/comm.py's 20
    barrier-started steps took 42 s of a 63 s window of the README's CPU study as 2 ranks,
    batch 128, 2026-11-27). search/console/estimate.py estimates such a window as a trial's time
    less its ``extras_s``."""
    return replace(window, profile=False, loader_profile=False)


#: The signal on which a rank of a launched trial writes its Python stack to
#: stack.rank<N>.txt (measure/ranks.py): the runner's question to a stalled trial.
STACK_SIGNAL = signal.SIGUSR1


#: Beside a window's request of several nodes: the run id of the window once it has ended on
#: the driver's node (finished, pruned, stalled, killed), so the other nodes stop its ranks
#: there rather than leave them in a collective until it times out (measure/nodes.py).
ENDED_FILE = "ended"
#: In the study's directory: written as the study ends, so the other nodes' followers exit.
NODES_STOP_FILE = "nodes.stop"


def spans_nodes(launch: LaunchConfig | None) -> bool:
    """A window whose ranks run on several nodes (launch.nnodes > 1)."""
    return launch is not None and launch.nnodes > 1


def stalled_ranks(trial_dir: Path) -> str:
    """"rank 0 in torch/autograd/graph.py:824 (_engine_run_backward); rank 1 in
    tests/workloads_faulty.py:88 (loss)": each rank's innermost frame from its stack file; a
    rank stuck outside torch (the user's code, a read) is named first."""
    where, gone = {}, []
    for path in sorted(trial_dir.glob("stack.rank*.txt")):
        lines = path.read_text(errors="replace").splitlines()
        frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
        rank = int(path.stem.split("rank")[-1])
        if frames:
            where[rank] = _frame_words(frames[0])
        elif lines and lines[0].startswith("pid ") and not _running(int(lines[0].split()[1])):
            gone.append(rank)
    if not where and not gone:
        return ""
    # A rank that ended (killed) before its launcher noticed: the launcher learns of a death
    # when the rank's exit pipe closes, and the rank's DataLoader workers, which inherit it,
    # hold it open until they see their parent gone (seconds), longer than a short stall limit.
    # Its peers then fail in their collective with it and end too, but each writes its window's
    # result first: the rank that ended without one is the one that died, and is named first.
    stuck = sorted(where, key=lambda r: (where[r].startswith("torch/") or "/torch/" in where[r], r))
    gone.sort(key=lambda r: (_rank_result(trial_dir, r) is not None, r))
    return "; ".join([_ended_words(trial_dir, r) for r in gone]
                     + [f"rank {r} in {where[r]}" for r in stuck])


def rank_path(path: Path | str, rank: int) -> Path:
    """``result.json`` -> ``result.rank1.json`` (rank 0 keeps the trial's own progress and
    trace file, so the watchdog and the diagnosis read them as for one process)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")


def _rank_result(trial_dir: Path, rank: int) -> WindowResult | None:
    """The window result rank ``rank`` wrote before it ended, or None where it wrote none."""
    try:
        return WindowResult.read(rank_path(trial_dir / "result.json", rank))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _ended_words(trial_dir: Path, rank: int) -> str:
    result = _rank_result(trial_dir, rank)
    if result is None:
        return f"rank {rank} had ended (no process left to answer)"
    return f"rank {rank} had ended after it ({result.outcome}: {str(result.error)[:120]})"


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _frame_words(line: str) -> str:
    """'File "/x/torch/autograd/graph.py", line 824 in _engine_run_backward' -> short words."""
    try:
        path = line.split('"')[1]
        rest = line.split('"')[2].replace(", line ", ":").replace(" in ", " (").strip() + ")"
    except IndexError:
        return line
    short = "/".join(path.split("/")[-3:])
    return f"{short}{rest}"


class _Record:
    """Parsing for the boundary's dataclasses: unknown keys (from a newer or older autotune on
    the other side) are ignored rather than fatal."""

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls: type[R], path: Path) -> R:
        return cls.from_dict(json.loads(path.read_text()))


@dataclass
class TrialRequest(_Record):
    """What the driver asks one trial process to run. The runner fills ``progress_path`` and
    ``trace_path`` (the trial folder's files) before it writes the request for the child."""

    workload: dict[str, Any]
    knobs: dict[str, Any]
    device: str
    #: The study's window section, sized for the device (core/config.py); a dict (the JSON
    #: the child reads) is taken as one.
    window: WindowConfig
    seed: int = 0
    cpu_sized: bool = False
    trace: bool = False  # capture a torch.profiler trace after the window
    env: dict[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES for a worker
    ceilings: dict[str, bool] = field(default_factory=dict)  # which ceilings to measure
    grad_accum: int = 1  # micro-batches per optimizer step (study.keep_global_batch)
    numerics_steps: int = 0  # > 0: record this many steps' losses instead of measuring
    loader_profile: bool = False  # profile the loader alone after the window when it waited
    #: Several ranks (autotune/measure/ranks.py): the study's launch section; None: one process.
    launch: LaunchConfig | None = None
    run_id: str | None = None  # the rendezvous id of a window whose ranks span nodes
    progress_path: str | None = None  # the heartbeat the watchdog reads
    trace_path: str | None = None  # where the trace goes (with ``trace``)
    comm: bool = True  # measure the all-reduce's counterfactual under ranks (not figure_only)

    def __post_init__(self) -> None:
        if isinstance(self.window, dict):
            self.window = WindowConfig(**self.window)
        if isinstance(self.launch, dict):  # the JSON's; a request of no ranks has none
            known = LaunchConfig.__dataclass_fields__
            self.launch = LaunchConfig(**{k: v for k, v in self.launch.items() if k in known})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)



# ok: measured. The others end a trial with a reason and never stop the study.
OUTCOMES = ("ok", "oom", "timeout", "stalled", "crash", "nan", "pruned", "compile_fallback",
            "capture_failed", "interrupted", "driver_lost")


@dataclass
class WindowResult(_Record):
    outcome: str = "crash"
    samples_per_sec: float = 0.0
    step_ms: dict[str, float] = field(default_factory=dict)  # median, p10, p90, mean
    steps: int = 0
    samples: int = 0
    measure_s: float = 0.0
    peak_memory_gb: float = 0.0
    compile_s: float = 0.0  # first warm-up step minus a steady step: compile/autotune cost
    # torch.compile's FX graph cache in the first step: {"hits": n, "misses": n} (compiled
    # trials only); hits without misses = a warm compile from the study's shared cache.
    compile_cache: dict[str, int] = field(default_factory=dict)
    warmup_s: float = 0.0
    # Seconds spent on what a confirmation window skips: ceilings, profiler capture, loader
    # profile, the all-reduce's counterfactual (search/console/estimate.py and rounds.expected_round_s
    # estimate a confirmation window from a trial's time without them).
    extras_s: float = 0.0
    final_loss: float | None = None
    # Share of the measured step spent in each phase (see loop.py for how each is timed).
    timers: dict[str, float | None] = field(default_factory=dict)  # None: not measured
    trace: dict[str, Any] = field(default_factory=dict)  # profiler summary (diagnosis input)
    chunks: list[float] = field(default_factory=list)  # ``rate`` so far, at each chunk edge
    # The mock components' rates, in ``unit``: "loader" (input pipeline alone), "compute" (the
    # step alone on one cached device batch). Only those the driver asked for (not cached).
    ceilings: dict[str, float] = field(default_factory=dict)
    # Each measured ceiling's noise: the relative spread of its rate within its measurement.
    ceiling_noise: dict[str, float] = field(default_factory=dict)
    error: str = ""  # one line; the full stderr tail is kept by the runner
    # A numerics request (numerics.py): the first N optimizer steps' losses.
    losses: list[float] = field(default_factory=list)
    # Where the loader's time goes (measure/loader_profile.py): an input-bound trial's
    # in-process profiled pass, folded; {} when not profiled.
    loader_profile: dict[str, Any] = field(default_factory=dict)
    # What else the machine did while the window measured (measure/contention.py): other
    # processes' CPU, runqueue wait, steal, NVML on a GPU; "contended" with its "reasons".
    contention: dict[str, Any] = field(default_factory=dict)
    # The input shapes the measured steps saw (core/batch.ShapeLog.summary): a padding
    # collator's batches each have their own.
    input_shapes: dict[str, Any] = field(default_factory=dict)
    # The optimizer's class name as the trial built it (type(optimizer).__name__): the
    # learning-rate rule the answers state follows its family (core/effects.py).
    optimizer: str = ""
    # A trial of several ranks (measure/ranks.py): each rank's figures (rank, samples_per_sec
    # as that rank saw the run, step median, data wait share), slowest first.
    ranks: list[dict[str, Any]] = field(default_factory=list)
    # Gradient communication (a trial of several ranks): the step with and without DDP's
    # all-reduce on one cached batch, and the share of the synced step that waits on it.
    comm: dict[str, Any] = field(default_factory=dict)
    # Tokens (a workload whose inputs carry them: Workload.tokens, core/tokens.py). ``unit``
    # is the unit of the objective (``rate``), of ``chunks`` and of ``ceilings``: "tokens/s"
    # (real tokens) where the batches had tokens, else "samples/s". ``tokens`` and
    # ``tokens_computed`` are the window's real and padded-included tokens, every rank's.
    unit: str = "samples/s"
    tokens_per_sec: float = 0.0
    tokens: int = 0
    tokens_computed: int = 0
    padding_share: float | None = None  # 1 - tokens / tokens_computed; None: no tokens
    # Each batch's padding share over the window: {"mean", "max"} ({} without tokens).
    padding_batches: dict[str, float] = field(default_factory=dict)
    # A length-grouped loader (measure/batches.py length_group_steps): the steps of one
    # mega-batch and the window's whole mega-batches ({} for any other loader).
    length_groups: dict[str, int] = field(default_factory=dict)
    # Filled by the runner (parent side):
    wall_s: float = 0.0
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def rate(self) -> float:
        """The window's throughput in its ``unit``: real tokens/s where it counted tokens."""
        return self.tokens_per_sec if self.unit == "tokens/s" else self.samples_per_sec

    def to_json(self) -> str:
        return json.dumps(_finite(asdict(self)))



def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: store them as strings so the record survives (and says so)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
