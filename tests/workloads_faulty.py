"""Workloads that fail for real, one way each, for the fault tests (no mocked outcomes)."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils.data import Dataset

from autotune.workloads.mlp import MLPWorkload


class _Sleepy(Dataset):
    """Items come fine until `after`, then __getitem__ never returns."""

    def __init__(self, inner: Dataset, after: int):
        self.inner, self.after, self.seen = inner, after, 0

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        self.seen += 1
        if self.seen > self.after:
            time.sleep(3600)
        return self.inner[i]


class HangingLoader(MLPWorkload):
    """The loader hangs after a few batches (in the main process, or in a worker)."""

    def dataset(self, transfer_dtype: str) -> Dataset:
        return _Sleepy(super().dataset(transfer_dtype), after=32 * 3)


class HangingStep(MLPWorkload):
    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        if not hasattr(self, "_calls"):
            self._calls = 0
        self._calls += 1
        if self._calls > 3:
            time.sleep(3600)
        return super().loss(outputs, targets)


class RaisesOOM(MLPWorkload):
    """Raises the real exception a CUDA OOM raises, with its real message."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)"
        )


class HoldsMemory(MLPWorkload):
    """Really allocates `hold_gb` of host memory for the whole window."""

    def __init__(self, hold_gb: float = 1.0, **kw: Any):
        super().__init__(**kw)
        self.hold_gb = hold_gb

    def model(self) -> torch.nn.Module:
        m = super().model()
        m.register_buffer("ballast", torch.ones(int(self.hold_gb * 2**30 / 4)))
        return m


class NaNLoss(MLPWorkload):
    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return super().loss(outputs, targets) * float("nan")


class _Segfaults(Dataset):
    def __init__(self, inner: Dataset):
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        if torch.utils.data.get_worker_info() is not None:
            faulthandler.disable()
            faulthandler._sigsegv()
        return self.inner[i]


class SegfaultingWorker(MLPWorkload):
    """A DataLoader worker dies from SIGSEGV (with num_workers > 0)."""

    def dataset(self, transfer_dtype: str) -> Dataset:
        return _Segfaults(super().dataset(transfer_dtype))


class SegfaultingStep(MLPWorkload):
    """The training process itself dies from SIGSEGV."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        faulthandler.disable()
        faulthandler._sigsegv()
        raise AssertionError("unreachable")


class KilledFromOutside(MLPWorkload):
    """The training process receives a SIGKILL the OOM killer did not send (here its own; in
    life a user's ``kill -9``, a scheduler's preemption)."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        os.kill(os.getpid(), 9)
        raise AssertionError("unreachable")


class SpawnsGrandchild(MLPWorkload):
    """Leaves a sleeping grandchild behind and then hangs; its pid goes to `pid_file`."""

    def __init__(self, pid_file: str = "", **kw: Any):
        super().__init__(**kw)
        self.pid_file = pid_file

    def model(self) -> torch.nn.Module:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(self.pid_file, "w") as f:
            f.write(str(child.pid))
        time.sleep(3600)
        return super().model()


class RaisesOnBuild(MLPWorkload):
    """Fails when constructed: the driver reports it before any trial runs."""

    def __init__(self, **kw: Any):
        raise RuntimeError("cannot open /data/train: no such file")


class RaisesInDataset(MLPWorkload):
    """Constructs fine, then fails inside the trial when its data is opened."""

    def dataset(self, transfer_dtype: str) -> Dataset:
        raise RuntimeError("cannot open /data/train: no such file")


class SlowStep(MLPWorkload):
    """Each step sleeps `sleep_ms`: a slow but healthy trial (for driver-kill tests)."""

    def __init__(self, sleep_ms: float = 200.0, **kw: Any):
        super().__init__(**kw)
        self.sleep_ms = sleep_ms

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        time.sleep(self.sleep_ms / 1e3)
        return super().loss(outputs, targets)


class OneHiccup(MLPWorkload):
    """Healthy steps, but once, ``after_s`` into training, a step stalls for ``stall_ms``
    (another process took the cores for a moment): a good trial the pruner must not condemn
    on that one stretch. Every step sleeps ``step_ms`` besides: steps of a known length, which
    a busy machine stretches by a small share only, so the hiccup is the one slow stretch."""

    def __init__(self, after_s: float = 0.8, stall_ms: float = 400.0, step_ms: float = 10.0,
                 **kw: Any):
        super().__init__(**kw)
        self.after_s, self.stall_ms, self.step_ms, self.first = after_s, stall_ms, step_ms, None

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        now = time.monotonic()
        self.first = self.first or now
        if self.after_s is not None and now - self.first >= self.after_s:
            self.after_s = None
            time.sleep(self.stall_ms / 1e3)
        time.sleep(self.step_ms / 1e3)
        return super().loss(outputs, targets)

    def model(self) -> torch.nn.Module:
        # One intra-op thread: a step never waits at a barrier for a sibling thread that a busy
        # machine descheduled (the trial process is this workload's alone).
        torch.set_num_threads(1)
        return super().model()


def pid_file_env() -> str:
    return os.environ.get("AUTOTUNE_TEST_PIDFILE", "")


class _Counting(torch.nn.Module):
    """Each call bakes a new Python int into the graph: dynamo recompiles every step."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.inner(x) * (1.0 + self.calls * 1e-6)


class Recompiles(MLPWorkload):
    """torch.compile hits its recompile limit after 2 graphs and silently runs eager."""

    def model(self) -> torch.nn.Module:
        import torch._dynamo

        torch._dynamo.config.recompile_limit = 2
        return _Counting(super().model())


class _ReportsWorkerParent(Dataset):
    """Each item writes the loading process's parent pid to `path` (in a worker: who forked it)."""

    def __init__(self, inner: Dataset, path: str):
        self.inner, self.path = inner, path

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        with open(self.path, "w") as f:
            f.write(str(os.getppid()))
        return self.inner[i]


class ReportsLoaderStart(MLPWorkload):
    """Healthy; records how its DataLoader workers are started: the trial's pid and start
    method to `report_file`, each worker's parent pid to `report_file`.worker."""

    def __init__(self, report_file: str = "", **kw: Any):
        super().__init__(**kw)
        self.report_file = report_file

    def dataset(self, transfer_dtype: str) -> Dataset:
        import torch.multiprocessing as mp

        with open(self.report_file, "w") as f:
            f.write(f"{os.getpid()} {mp.get_start_method()}")
        return _ReportsWorkerParent(super().dataset(transfer_dtype), self.report_file + ".worker")


@torch.library.custom_op("autotune_tests::traced_slowly", mutates_args=())
def _traced_slowly(x: torch.Tensor, trace_sleep_s: float) -> torch.Tensor:
    """At run time: a copy of ``x``, as cheap as any op."""
    return x.clone()


_TRACED: list[bool] = []


@_traced_slowly.register_fake
def _(x: torch.Tensor, trace_sleep_s: float) -> torch.Tensor:
    # The fake (meta) kernel runs only while torch.compile traces the model (Dynamo, then
    # AOTAutograd), never in a compiled or eager step. It sleeps on its first call only: a
    # compile stage longer than trace_sleep_s by the compiler's own time, whatever the machine.
    if not _TRACED:
        _TRACED.append(True)
        time.sleep(trace_sleep_s)
    return torch.empty_like(x)


class _TracedSlowly(torch.nn.Module):
    def __init__(self, trace_sleep_s: float):
        super().__init__()
        self.trace_sleep_s = trace_sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _traced_slowly(x, self.trace_sleep_s)


class SlowToCompile(MLPWorkload):
    """The mlp behind an op whose tracing sleeps ``trace_sleep_s``: a real torch.compile whose
    silent build takes at least that long on any machine (and about that much longer than
    the compiler's own time), and whose compiled steps (and eager
    ones) cost nothing extra. The op reads the input batch, which needs no gradient."""

    def __init__(self, trace_sleep_s: float = 3.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.trace_sleep_s = trace_sleep_s

    def model(self) -> torch.nn.Module:
        return torch.nn.Sequential(_TracedSlowly(self.trace_sleep_s), super().model())


class RankFault(MLPWorkload):
    """Rank 1 of a launched trial fails after a few steps, one way per ``fault``: ``raise``
    an exception, ``hang`` in its loss, ``gather`` (wait in an all-gather rank 0 never joins),
    ``kill`` itself with SIGKILL, or kill its ``launcher`` (the trial process running the
    elastic agent, its parent) with SIGKILL.
    Rank 0 trains on; where rank 1 raises or is killed, rank 0 is in its own Python code at
    that step (a pause of ``busy_s`` in its loss, as a longer forward would be), not waiting
    in the all-reduce: the launcher's SIGTERM finds it there, and its window records torch's
    SignalException, the crash of a rank the launcher stopped (which once led the trial's
    reason in place of the rank that died, issue 60).

    With ``faults`` (a list) and ``count_dir``, one study tries them all: rank 1 of the n-th
    window the study launches takes ``faults[n]`` (``none``: healthy; past the list's end:
    healthy), counting windows by the files it leaves in ``count_dir``. The baseline is then
    healthy, so the study survives its faults and exports."""

    def __init__(self, fault: str = "raise", faults: list[str] | None = None,
                 count_dir: str | None = None, busy_s: float = 3.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.fault, self.faults, self.count_dir = fault, faults, count_dir
        self.busy_s = busy_s

    def _this_windows_fault(self) -> str:
        if self.faults is None or self.count_dir is None:
            return self.fault
        n = len(os.listdir(self.count_dir))  # one window at a time: no race
        open(os.path.join(self.count_dir, str(n)), "w").close()
        return self.faults[n] if n < len(self.faults) else "none"

    def _peers_fault(self) -> str:
        """Rank 0's view of this window's fault: rank 1 counted the window at its first step,
        before the all-reduces of the steps since."""
        if self.faults is None or self.count_dir is None:
            return self.fault
        n = len(os.listdir(self.count_dir)) - 1
        return self.faults[n] if 0 <= n < len(self.faults) else "none"

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        self._calls = getattr(self, "_calls", 0) + 1
        if os.environ.get("RANK") == "0" and self._calls == 4 and self._peers_fault() in (
                "raise", "kill"):
            time.sleep(self.busy_s)  # the launcher's SIGTERM ends it: SignalException here
        if os.environ.get("RANK") == "1":
            if self._calls == 1:
                self._fault = self._this_windows_fault()
            if self._calls > 3:
                if self._fault == "raise":
                    raise ValueError("rank 1's injected fault")
                if self._fault == "hang":
                    time.sleep(3600)
                if self._fault == "kill":
                    os.kill(os.getpid(), 9)
                if self._fault == "launcher":
                    os.kill(os.getppid(), 9)
                    time.sleep(3600)  # orphaned: the runner must reap this rank too
                if self._fault == "gather":  # an all-gather its peer never joins
                    out = torch.empty(2 * 4)
                    torch.distributed.all_gather_into_tensor(out, torch.ones(4), group=self._side)
        return super().loss(outputs, targets)

    def model(self) -> torch.nn.Module:
        # A second process group, made by every rank alike (a collective call): rank 1's
        # ``gather`` fault waits in an all-gather on it that rank 0 never calls.
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self._side = dist.new_group(backend="gloo")
        return super().model()
