"""Tiny workloads with a known bottleneck, for the profiler and diagnosis tests.

- ``SleepyLoaderWorkload``: every ``__getitem__`` sleeps (a slow read: storage, network), the
  model is tiny: input-bound, the loader waits on I/O.
- ``BusyLoaderWorkload``: the same, but each item keeps a CPU busy (a slow decode): input-bound,
  the loader computes.
- ``ComputeWorkload``: a small in-memory dataset and a wide MLP: compute-bound.
- ``BigActivationWorkload``: a 64 MiB activation per step, cheap arithmetic: page faults.
- ``TwoAnswersWorkload``: slow reads and a fixed cost per step: a larger batch and workers
  are fastest, workers alone the fastest that trains the same model.
- ``SyncWorkload``: the loss reads many small tensors with ``.item()`` (CUDA: a host-device
  sync each): sync-bound. GPU test only.

``python -m tests.workloads_diag`` re-records the stored traces in ``tests/data/``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from autotune.core.workload import Workload

DATA = Path(__file__).resolve().parent / "data"


class SleepyDataset(Dataset):
    def __init__(self, n: int, features: int, classes: int, sleep_s: float):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.sleep_s)  # a slow read / decode
        return self.x[i], self.y[i]


class BusyDataset(SleepyDataset):
    """Like SleepyDataset, but each item keeps a CPU busy for its time (a decode, an
    augmentation) instead of waiting."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.thread_time() + self.sleep_s
        while time.thread_time() < end:
            pass
        return self.x[i], self.y[i]


class _Classifier(Workload):
    features, hidden, classes = 32, 32, 4

    def model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(self.features, self.hidden), nn.ReLU(),
                             nn.Linear(self.hidden, self.classes))

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        return nn.functional.cross_entropy(outputs, targets)

    def in_memory(self) -> Dataset:
        """``n`` random samples held in memory: no input-pipeline cost."""
        g = torch.Generator().manual_seed(0)
        return TensorDataset(torch.randn(self.n, self.features, generator=g),
                             torch.randint(0, self.classes, (self.n,), generator=g))

    def optimizer(self, params: Any, **impl: Any) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.01, **impl)


class SleepyLoaderWorkload(_Classifier):
    """Input-bound: 8 items x 10 ms of sleep per batch, a tiny model step."""

    name = "sleepy-loader"

    def __init__(self, batch_size: int = 8, sleep_ms: float = 10.0, n: int = 256):
        self.sleep_s, self.n = sleep_ms / 1e3, n
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return SleepyDataset(self.n, self.features, self.classes, self.sleep_s)

    def model(self) -> nn.Module:
        # The step must stay the fast part whatever the machine's load: one intra-op thread
        # never waits at a barrier for a sibling thread a busy machine descheduled (two threads
        # made this tiny step take 270 ms beside stress-ng, and the loader no longer the
        # bottleneck). The trial process is this workload's alone.
        torch.set_num_threads(1)
        return super().model()


class BusyLoaderWorkload(SleepyLoaderWorkload):
    """Input-bound like SleepyLoaderWorkload, but the loader computes (10 ms of CPU per item)."""

    name = "busy-loader"

    def dataset(self, transfer_dtype: str) -> Dataset:
        return BusyDataset(self.n, self.features, self.classes, self.sleep_s)


class ComputeWorkload(_Classifier):
    """Compute-bound: a cached 128-sample dataset, a 3-layer 3072-wide MLP (~4 GFLOP/step)."""

    name = "compute"

    def __init__(self, batch_size: int = 64, width: int = 3072, n: int = 128):
        self.features, self.hidden, self.n = 256, width, n
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return self.in_memory()

    def model(self) -> nn.Module:
        return nn.Sequential(
            nn.Linear(self.features, self.hidden), nn.ReLU(),
            nn.Linear(self.hidden, self.hidden), nn.ReLU(),
            nn.Linear(self.hidden, self.classes),
        )


class _Repeat(nn.Module):
    """Cheap arithmetic around one large activation per step: the input repeated ``times``."""

    def __init__(self, features: int, classes: int, times: int):
        super().__init__()
        self.times, self.fc = times, nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.repeat(1, self.times)  # [batch, features * times], fresh every step
        return self.fc(wide.view(x.shape[0], self.times, -1).mean(1))


class BigActivationWorkload(_Classifier):
    """Page-fault-bound on CPU: each step allocates a 64 MiB activation (and its gradient),
    above glibc's largest mmap threshold, so the default allocator maps it afresh every step."""

    name = "big-activation"

    def __init__(self, batch_size: int = 64, times: int = 8192, n: int = 256):
        self.times, self.n = times, n
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return self.in_memory()

    def model(self) -> nn.Module:
        return _Repeat(self.features, self.classes, self.times)


class SyncWorkload(_Classifier):
    """Sync-bound on CUDA: the loss reads ``reads`` per-sample losses with .item() (a
    logging/metric habit), each a device-to-host copy and a stream synchronize."""

    name = "sync"

    def __init__(self, batch_size: int = 16, reads: int = 64, n: int = 1024):
        self.reads, self.n = reads, n
        self.defaults = {"batch_size": batch_size, "num_workers": 0}

    def dataset(self, transfer_dtype: str) -> Dataset:
        return self.in_memory()

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        per_sample = nn.functional.cross_entropy(outputs, targets, reduction="none")
        self.logged = [per_sample[i % len(per_sample)].item() for i in range(self.reads)]
        return per_sample.mean()


class _Sleeps(nn.Module):
    """A forward that sleeps: a step as slow as one beside a CPU hog, without using a core."""

    def __init__(self, inner: nn.Module, sleep_s: float):
        super().__init__()
        self.inner, self.sleep_s = inner, sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return self.inner(x)


class SlowStepWorkload(ComputeWorkload):
    """Every training step takes ``step_s`` (a sleep in forward): a 3.5 s ResNet step beside
    `stress-ng --cpu 1`, scaled down."""

    name = "slow-step"

    def __init__(self, step_s: float = 0.3):
        super().__init__(batch_size=8, width=64, n=64)
        self.step_s = step_s

    def model(self) -> nn.Module:
        return _Sleeps(super().model(), self.step_s)


class TwoAnswersWorkload(SleepyLoaderWorkload):
    """Each item sleeps ``item_ms`` (a slow read: DataLoader workers read in parallel) and each
    step ``step_ms`` (a fixed cost per step: a larger batch pays it less often). The fastest
    configuration takes a larger batch and workers; the fastest that trains the same model
    takes the workers alone at the user's batch: two answers known in advance, held by sleeps
    so a busy machine does not reorder them."""

    name = "two-answers"

    def __init__(self, batch_size: int = 8, item_ms: float = 3.0, step_ms: float = 25.0,
                 n: int = 512):
        super().__init__(batch_size=batch_size, sleep_ms=item_ms, n=n)
        self.step_s = step_ms / 1e3

    def model(self) -> nn.Module:
        return _Sleeps(super().model(), self.step_s)


def spec(cls: type[Workload], **kwargs: Any) -> dict[str, Any]:
    """The workload config node for a class here, importable wherever the tests run from."""
    return {"_target_": f"{cls.__module__}.{cls.__name__}", **kwargs}


def baseline_knobs(workload: Workload, device: str = "cpu") -> dict[str, Any]:
    """Trial 0's knobs for this workload on this machine, as the study would run them."""
    from autotune.core.env import Env, _probe_here
    from autotune.core.space import build_space

    env = Env.from_dict(_probe_here(device))
    return build_space(env, workload, {}).baseline


def record_trace(workload: Workload, path: Path, steps: int = 2, warmup: int = 2) -> dict[str, Any]:
    """A real capture on CPU: warm up like the window, then profiling.capture()."""
    from autotune.core.training import Training
    from autotune.measure.profiling import capture

    run = Training(workload, baseline_knobs(workload), "cpu")

    def batches() -> Any:
        while True:
            yield from run.loader

    it = batches()
    for _ in range(warmup):
        run.step(*run.to_device(*next(it)))
    return capture(run, it, steps, str(path))


def trim_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Drop what the summary does not read (flows, metadata, args it ignores) to keep stored
    traces small; keeps every complete event and the [memory] instants."""
    keep_args = ("bytes", "Bytes", "Total Allocated", "Device Type")
    events = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") not in ("X", "i") or (e.get("ph") == "i" and e.get("name") != "[memory]"):
            continue
        e = {k: v for k, v in e.items() if k != "args"} | (
            {"args": {k: v for k, v in e["args"].items() if k in keep_args}} if e.get("args") else {}
        )
        events.append(e)
    return {"schemaVersion": trace.get("schemaVersion"), "traceEvents": events}


def main() -> int:
    DATA.mkdir(exist_ok=True)
    for name, wl in (("sleepy_cpu", SleepyLoaderWorkload()), ("compute_cpu", ComputeWorkload())):
        tmp = DATA / f"{name}.raw.json"
        summary = record_trace(wl, tmp)
        trace = trim_trace(json.loads(tmp.read_text()))
        tmp.unlink()
        out = DATA / f"{name}.trace.json"
        out.write_text(json.dumps(trace, separators=(",", ":")))
        print(out, f"{out.stat().st_size / 1e3:.0f} kB", json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
